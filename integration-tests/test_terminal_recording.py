"""A terminal recording: ``opentinker train`` (and ``watch``) run in tmux, the pane captured.

docs/guides/progress.md shows the captured screens between ``<!-- recording: NAME -->`` markers;
this test compares their structure (every line with its numbers, spinner and bar masked) with a
fresh run's, not the numbers. ``OPENTINKER_UPDATE_RECORDING=1`` rewrites the recording in the docs
from this run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guides" / "progress.md"
WIDTH, HEIGHT = 120, 45

# GRPO from the random tiny model on the echo env: every reward is 0, so the hint shows too
FLAT_GRPO = """\
name: flat
seed: 0
model: {name: tiny}
env: {id: echo/echo-v0}
algorithm: {name: grpo, steps: 4, eval_size: 2}
rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 3}
checkpoint: {every: 2}
logging: {tensorboard: false, plot: false}
"""

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)")


class Tmux:
    """A tmux server of its own (``-L``), one detached session of WIDTH x HEIGHT running ``command``."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str]) -> None:
        self.socket = f"ot-rec-{uuid.uuid4().hex[:8]}"
        self.done = f"done-{self.socket}"
        shell = f"{command}; echo \"[exit $?]\"; tmux -L {self.socket} wait-for -S {self.done}; sleep 120"
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "rec", "-x", str(WIDTH), "-y", str(HEIGHT),
                  "-c", str(cwd), *(f"-e{k}={v}" for k, v in env.items()), shell)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "rec")

    def record(self, timeout_s: float = 300) -> tuple[list[str], str]:
        """The distinct screens seen while the command ran (sampled every 0.1 s) and the final
        one with its scrollback."""
        frames: list[str] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            screen = self.screen()
            if not frames or screen != frames[-1]:
                frames.append(screen)
            if "[exit " in screen:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the command did not finish:\n" + self.screen())
        return frames, self.tmux("capture-pane", "-p", "-t", "rec", "-S", "-")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def trim(screen: str) -> str:
    """The screen up to the ``[exit N]`` line, without trailing blank lines."""
    lines = [line.rstrip() for line in screen.splitlines()]
    if any(line.startswith("[exit ") for line in lines):
        lines = lines[: next(i for i, line in enumerate(lines) if line.startswith("[exit "))]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def skeleton(screen: str) -> list[str]:
    """Each line with numbers as ``#``, the spinner and bar dropped, runs of spaces as one."""
    out = []
    for line in screen.splitlines():
        line = re.sub(r"[\u2800-\u28ff]", "", line)  # the spinner
        line = re.sub(r"[━╺╸]+", "BAR", line)
        line = re.sub(r"\b[0-9a-f]{12}\b", "HEX", line)  # a Ray node id
        line = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", line)
        line = re.sub(r"(# ?[KMGT]?)(?= ?(parameters|B\b))", "#", line)
        out.append(" ".join(line.split()))
    return out


def recorded(name: str) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    m = re.search(rf"<!-- recording: {name} -->\n```text\n(.*?)\n```\n<!-- /recording -->", text, re.S)
    assert m, f"{GUIDE} has no recording named {name!r}"
    return m.group(1)


def update_recording(name: str, screen: str) -> None:
    text = GUIDE.read_text(encoding="utf-8")
    block = f"<!-- recording: {name} -->\n```text\n{screen}\n```\n<!-- /recording -->"
    text = re.sub(rf"<!-- recording: {name} -->\n```text\n.*?\n```\n<!-- /recording -->", lambda _: block, text, flags=re.S)
    GUIDE.write_text(text, encoding="utf-8")


def run_in_tmux(command: str, cwd: Path) -> tuple[list[str], str]:
    env = {"HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(cwd / "cache"), "TERM": "xterm-256color",
           "COLUMNS": str(WIDTH), "LINES": str(HEIGHT),  # else a COLUMNS=80 from the caller's environment wins
           "PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    session = Tmux(command, cwd, env)
    try:
        return session.record()
    finally:
        session.close()


def test_train_in_a_terminal_shows_status_lines_a_live_bar_and_the_hint(tmp_path):
    (tmp_path / "job.yaml").write_text(FLAT_GRPO)
    frames, final = run_in_tmux(f"{sys.executable} -m tinker_client.cli train job.yaml", tmp_path)
    screen = trim(final)
    assert "completed: 4 steps; run dir: runs/flat" in screen, screen
    # live: a frame while torch was imported, before any step
    assert any("importing" in f and "0/4" in f and "completed:" not in f for f in frames), frames[:3]
    if os.environ.get("OPENTINKER_UPDATE_RECORDING") == "1":
        update_recording("train", screen)
    assert skeleton(screen) == skeleton(recorded("train"))


@pytest.fixture
def scheduler():
    """A real scheduler (``opentinker scheduler start``) on a short, fixed-length temp dir, so
    the screens wrap the same on every run; yields ``(address, env, root)``."""
    pytest.importorskip("tinker_scheduler", reason="needs tinker-scheduler (the integration session installs it)")
    import contextlib
    import signal
    import socket
    import tempfile

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    root = Path(tempfile.mkdtemp(prefix="otrec-", dir="/tmp"))  # /tmp/otrec-XXXXXXXX
    port = free_port()
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": str(root / "ray"),
           "OPENTINKER_CACHE": str(root / "cache"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tinker_client.cli", "scheduler", "start", "--port", str(port), "--num-cpus", "2",
         "--db", str(root / "db.sqlite"), "--runs-dir", str(root / "runs"), "--metrics-port", "-1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )
    try:
        seen = []
        while "listening on" not in (line := proc.stdout.readline()):
            seen.append(line)
            if not line and proc.poll() is not None:
                pytest.fail("scheduler did not start:\n" + "".join(seen[-20:]))
        yield f"127.0.0.1:{port}", env, root
    finally:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # Ray's helpers too
        shutil.rmtree(root, ignore_errors=True)


def test_watch_in_a_terminal_shows_the_job_live_with_its_hint(scheduler):
    address, env, root = scheduler
    (root / "job.yaml").write_text(FLAT_GRPO)
    submitted = subprocess.run([sys.executable, "-m", "tinker_client.cli", "submit", "job.yaml", "--scheduler", address],
                               capture_output=True, text=True, env=env, cwd=root, timeout=120)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    frames, final = run_in_tmux(f"{sys.executable} -m tinker_client.cli watch {job_id} --scheduler {address}", root)
    screen = trim(final).replace(job_id, "job-3f9c2a1b7d04").replace(str(root), "/srv/opentinker").replace(address, "HOST:PORT")
    assert "job job-3f9c2a1b7d04 SUCCEEDED" in screen and "hint: for 3 steps in a row" in screen, screen
    assert any("4/4" not in f and "/4" in f for f in frames), frames[:3]  # the bar, live, before the end
    if os.environ.get("OPENTINKER_UPDATE_RECORDING") == "1":
        update_recording("watch", screen)
    assert skeleton(screen) == skeleton(recorded("watch"))
