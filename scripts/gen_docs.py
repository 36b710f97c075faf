"""Regenerate the generated pages of docs/ (the job config reference). ``--check`` only compares."""

from __future__ import annotations

import sys
from pathlib import Path

from tinker_core.config import render_reference

ROOT = Path(__file__).resolve().parent.parent
PAGES = {ROOT / "docs" / "reference" / "config.md": render_reference}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, render in PAGES.items():
        text = render()
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
        else:
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{path.relative_to(ROOT)} is stale: run 'uv run python scripts/gen_docs.py'", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
