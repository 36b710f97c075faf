"""Check the answers before anything is written; cookiecutter renders this file with them.

Exits 1 with one line per problem on stderr, so a bad answer never leaves half a project.
"""

from __future__ import annotations

import keyword
import re
import sys

NAME = {{ cookiecutter.name | jsonify }}
PROJECT = {{ cookiecutter.project_name | jsonify }}
MODULE = {{ cookiecutter.__module | jsonify }}
VERSION = {{ cookiecutter.version | jsonify }}

NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
PROJECT_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
VERSION_RE = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")

problems = []
if not NAME_RE.match(NAME):
    problems.append(f"name {NAME!r}: use lower-case letters and digits, words joined by '-', "
                    "starting with a letter (e.g. 'word-count')")
if not PROJECT_RE.match(PROJECT):
    problems.append(f"project_name {PROJECT!r} is not a valid distribution name (letters, digits, "
                    "'-', '_', '.'), e.g. 'tinker-estimator-word-count'")
elif not MODULE.isidentifier() or keyword.iskeyword(MODULE):
    problems.append(f"project_name {PROJECT!r} gives the module name {MODULE!r}, which is not a "
                    "Python identifier; start it with a letter")
if not VERSION_RE.match(VERSION):
    problems.append(f"version {VERSION!r} is not a PEP 440 version such as '0.1.0'")
for problem in problems:
    print(f"error: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
