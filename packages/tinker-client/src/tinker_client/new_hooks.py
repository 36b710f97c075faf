"""The cookiecutter hooks of the ``opentinker new`` templates, one copy for all four.

Each template's ``hooks/pre_gen_project.py`` and ``hooks/post_gen_project.py`` is a two-line shim
that cookiecutter renders with the answers and runs with its own Python -- the one that runs
``opentinker new``, where tinker-client is installed -- and that calls :func:`check_answers` or
:func:`keep_variant`.
"""

from __future__ import annotations

import json
import keyword
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinker_core.names import PLUGIN_NAME_RULE, is_plugin_name

TASK_RE = re.compile(r"^[a-z0-9][a-z0-9_.]*(-[a-z0-9_.]+)*$")
PROJECT_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
VERSION_RE = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
PROJECT_PREFIX = {"advantage-estimator": "tinker-estimator-"}
"""Template kind -> the prefix of its distribution name, where it is not ``tinker-<kind>-``."""


def answer_problems(answers: Mapping[str, Any]) -> list[str]:
    """What is wrong with a template's answers (the cookiecutter context), one line each."""
    name, project, module, version = (answers[k] for k in ("name", "project_name", "__module", "version"))
    kind = Path(answers.get("_template", "")).name
    example = PROJECT_PREFIX.get(kind, f"tinker-{kind}-") + "word-count"
    problems = []
    if not is_plugin_name(name):
        problems.append(f"name {name!r}: {PLUGIN_NAME_RULE} (e.g. 'word-count')")
    task = answers.get("task")
    if task is not None and (not TASK_RE.fullmatch(task) or re.search(r"-v\d+\Z", task)):
        problems.append(f"task {task!r}: use lower-case letters, digits, '-', '_' or '.', without a "
                        "'-vN' suffix (the env id adds '-v0'), e.g. 'main'")
    if not PROJECT_RE.fullmatch(project):
        problems.append(f"project_name {project!r} is not a valid distribution name (letters, digits, "
                        f"'-', '_', '.'), e.g. {example!r}")
    elif not module.isidentifier() or keyword.iskeyword(module):
        problems.append(f"project_name {project!r} gives the module name {module!r}, which is not a "
                        "Python identifier; start it with a letter")
    if not VERSION_RE.fullmatch(version):
        problems.append(f"version {version!r} is not a PEP 440 version such as '0.1.0'")
    return problems


def check_answers(answers_json: str) -> None:
    """The pre-generate hook: exit 1 with one ``error:`` line per problem on stderr, so a bad
    answer never leaves half a project; ``answers_json`` is the cookiecutter context as JSON."""
    problems = answer_problems(json.loads(answers_json))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


def keep_variant(choice: str, root: Path | None = None) -> None:
    """The post-generate hook: keep only what the chosen option needs.

    Every variant of the option-dependent files lives under ``_variants/<choice>/`` in the
    rendered project (``root``, default: the current directory, where cookiecutter runs the
    hook), at the path it should have; this moves the chosen variant into place and deletes the
    others.
    """
    root = root or Path.cwd()
    # An installer that byte-compiles the template files (pip does, by default) leaves
    # __pycache__ directories in the template; they are not part of the project.
    for cache in sorted(root.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache, ignore_errors=True)
    variants = root / "_variants"
    chosen = variants / choice
    if not chosen.is_dir():
        raise SystemExit(f"error: the template has no variant {choice!r} (found: "
                         f"{sorted(p.name for p in variants.iterdir())})")
    for source in sorted(p for p in chosen.rglob("*") if p.is_file()):
        target = root / source.relative_to(chosen)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), str(target))
    shutil.rmtree(variants)
