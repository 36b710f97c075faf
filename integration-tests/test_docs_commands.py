"""The shell commands in the docs that are marked runnable, run as a reader would run them.

A fenced ``console`` / ``bash`` / ``sh`` block preceded by the line ``<!-- runnable -->`` is run
here; mark only blocks that take seconds and need no network, GPU or running service (the Python
blocks are run by ``test_docs.py``). In a block whose lines start with ``$ ``, those lines (and
their ``\\`` continuation lines) are the commands and the lines after each are its output;
otherwise every line is a command. Each command must exit 0, unless its shown output has a line
starting with ``error:``: then it must fail, and print that line (whitespace aside).

All runnable blocks of a page run in order, in one shell per block, in one fresh directory per
page (``examples/`` is linked in), with the workspace's ``opentinker`` first on ``PATH``, an
empty model cache (``OPENTINKER_CACHE``) and ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKER = "<!-- runnable -->"
BLOCK = re.compile(r"^<!-- runnable -->\n```(?:console|bash|sh)[^\n]*\n(.*?)^```", re.M | re.S)
SENTINEL = "@@docs-command-exit@@"


@dataclass
class Command:
    text: str
    shown: list[str]  # the output the page shows after it

    @property
    def shown_errors(self) -> list[str]:
        return [line for line in self.shown if line.startswith("error:")]


def commands(block: str) -> list[Command]:
    lines = block.splitlines()
    if not any(line.startswith("$ ") for line in lines):
        return [Command(line, []) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    out: list[Command] = []
    continuing = False
    for line in lines:
        if line.startswith("$ ") or continuing:
            text = line[2:] if line.startswith("$ ") and not continuing else line
            if continuing:
                out[-1].text += "\n" + text
            else:
                out.append(Command(text, []))
            continuing = line.rstrip().endswith("\\")
        elif out:
            out[-1].shown.append(line)
    return out


def runnable_pages() -> dict[str, list[str]]:
    pages = {}
    for path in sorted(DOCS.rglob("*.md")):
        blocks = BLOCK.findall(path.read_text(encoding="utf-8"))
        if blocks:
            pages[path.relative_to(DOCS).as_posix()] = blocks
    return pages


def squash(text: str) -> str:
    return " ".join(text.split())


def run_block(cmds: list[Command], cwd: Path, env: dict[str, str]) -> list[tuple[int, str]]:
    """Run the commands in one bash; each one's exit status and output (stdout and stderr)."""
    script = "".join(f"{c.text}\necho \"{SENTINEL} $?\"\n" for c in cmds)
    result = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=120)
    parts = re.split(rf"^{SENTINEL} (\d+)$", result.stdout, flags=re.M)
    outputs = parts[0:-1:2]
    codes = [int(c) for c in parts[1::2]]
    # stderr is not interleaved with the sentinels: give all of it to every command's output
    return [(code, out + result.stderr) for code, out in zip(codes, outputs, strict=True)]


def test_the_marker_finds_blocks_and_splits_commands_from_output():
    cmds = commands("$ opentinker one --x \\\n    --y\nshown\nerror: bad\n$ two\n")
    assert [(c.text, c.shown) for c in cmds] == [("opentinker one --x \\\n    --y", ["shown", "error: bad"]), ("two", [])]
    assert cmds[0].shown_errors == ["error: bad"]
    assert [c.text for c in commands("a   # note\n\n# comment\nb\n")] == ["a   # note", "b"]
    assert runnable_pages(), f"no page marks a block with {MARKER}"


@pytest.mark.parametrize("page", sorted(runnable_pages()))
def test_runnable_doc_commands(page, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "examples").symlink_to(ROOT / "examples")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "OPENTINKER_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "NO_COLOR": "1",
        "COLUMNS": "400",  # rich wraps at the terminal width; one line per message here
    }
    for i, block in enumerate(runnable_pages()[page]):
        cmds = commands(block)
        for cmd, (code, output) in zip(cmds, run_block(cmds, workdir, env), strict=True):
            where = f"{page} block {i}: `{cmd.text}`"
            if cmd.shown_errors:
                assert code != 0, f"{where} should fail as the page shows; it exited 0:\n{output[-2000:]}"
                for line in cmd.shown_errors:
                    assert squash(line) in squash(output), f"{where}: the page shows\n  {line}\nthe command printed:\n{output[-2000:]}"
            else:
                assert code == 0, f"{where} exited {code}:\n{output[-2000:]}"


def test_no_reference_to_the_oracles_file_that_moved():
    """The oracles live in docs/reference/oracles.md; ``ORACLES.md`` (outside the repository) is
    a dead reference wherever it is named."""
    files = [*DOCS.rglob("*.md"), ROOT / "README.md", *ROOT.glob("packages/*/src/**/*.py"), *ROOT.glob("packages/*/tests/**/*.py")]
    stale = [str(f.relative_to(ROOT)) for f in files if "ORACLES.md" in f.read_text(encoding="utf-8")]
    assert not stale, f"point these at docs/reference/oracles.md: {stale}"


GUIDES = ["quickstart.md", "install.md", *(f"guides/{p.name}" for p in sorted((DOCS / "guides").glob("*.md"))),
          *(f"tutorials/{p.name}" for p in sorted((DOCS / "tutorials").glob("*.md")))]
"""The pages a reader follows step by step: every command block there is run or says why not."""
ANY_BLOCK = re.compile(r"^```(?:console|bash|sh)\b", re.M)
RUN_MARKERS = (MARKER, "<!-- harness-test -->")  # harness-test: integration-tests/test_eval_harnesses.py runs it
NOT_RUN = re.compile(r"<!-- docs-commands: not run \((.+?)\) -->", re.S)


def unrun_blocks(text: str) -> int:
    """The command blocks of a page that no test runs (not preceded by a run marker)."""
    count = 0
    for m in ANY_BLOCK.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        count += before.strip() not in RUN_MARKERS
    return count


@pytest.mark.parametrize("page", GUIDES)
def test_every_guide_runs_its_command_blocks_or_says_why_not(page):
    """A guide's shell blocks are run (``<!-- runnable -->`` here, ``<!-- harness-test -->`` by the
    harness test), or the page says near its top why the others are not:
    ``<!-- docs-commands: not run (REASON) -->``, naming what needs a network, a GPU, a running
    service or minutes of training, and which test runs the same thing where one does."""
    text = (DOCS / page).read_text(encoding="utf-8")
    reason = NOT_RUN.search(text[:1500])
    if unrun_blocks(text):
        assert reason and len(reason.group(1).split()) >= 4, (
            f"docs/{page} has {unrun_blocks(text)} command block(s) no test runs: mark those that run offline in "
            f"seconds with {MARKER}, and say why the rest do not near the top with <!-- docs-commands: not run (REASON) -->")
    else:
        assert reason is None, f"docs/{page}: every command block runs; drop the stale 'not run' note"
