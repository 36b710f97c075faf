"""Keep only what the chosen options need.

Every variant of the option-dependent files lives under ``_variants/<choice>/`` in the rendered
project, at the path it should have; this moves the chosen variant into place and deletes the
others. cookiecutter runs this in the new project's directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

CHOICE = {{ cookiecutter.loss_kind | jsonify }}

root = Path.cwd()
# An installer that byte-compiles the template files (pip does, by default) leaves __pycache__
# directories in the template; they are not part of the project.
for cache in sorted(root.rglob("__pycache__"), reverse=True):
    shutil.rmtree(cache, ignore_errors=True)
variants = root / "_variants"
chosen = variants / CHOICE
if not chosen.is_dir():
    raise SystemExit(f"error: the template has no variant {CHOICE!r} (found: "
                     f"{sorted(p.name for p in variants.iterdir())})")
for source in sorted(p for p in chosen.rglob("*") if p.is_file()):
    target = root / source.relative_to(chosen)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(source), str(target))
shutil.rmtree(variants)
