"""Where an agent program's episodes run: ``isolation: thread`` or ``process`` (env ``agent/program-v0``).

``thread`` (the default) runs each episode's ``run(task, client)`` in a thread of the training
process: no start-up cost, but an agent that ends its process (``os._exit``, a segfault in a
native library, a signal) ends the training job with it. ``process`` runs each episode in a child
Python process of its own (:class:`ProcessPlay`): the child puts the training process's
``sys.path`` (plus ``path`` and the working directory, as :func:`load_ref` does) on its own,
enforces the scheduler's import policy when the parent runs under one
(:mod:`tinker_core.import_policy`), imports the entry the same way, builds its own ``openai.OpenAI`` client on the proxy's URL with
the episode's key, runs ``run(task, client)`` and writes the result back as JSON. A child that
exits abnormally is a failed episode (``agent_crash``, naming the exit code or signal); a result
JSON cannot hold is ``agent_bad_result``. When the episode ends (its timeout, or the child's
exit), every process it started is killed: the child's process group, its descendants and any
process carrying the episode's marker, a ``setsid`` grandchild included
(:mod:`tinker_algos.rollout.process_tree`), so nothing outlives the rollout.

This module is torch-free: the child imports only it, ``tinker_core.errors`` and the agent.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import secrets
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

from tinker_algos.rollout.process_tree import MARKER_VAR, adopt_orphans, kill_episode
from tinker_core.agent_program import ISOLATION_MODES  # the values of env.kwargs.isolation
from tinker_core.errors import ConfigError
from tinker_core.import_policy import (
    ImportPolicy,
    active_patterns,
    check_import,
    enforced,
    import_folders,
)

__all__ = ["ISOLATION_MODES", "ProcessPlay", "load_ref"]

_CHILD = "from tinker_algos.rollout.agent_isolation import _child_main; _child_main()"


def load_ref(ref: str, what: str, path: str | None) -> Any:
    """The object ``module:attr`` names, imported with ``path`` (when given) and the working
    directory on ``sys.path`` (a ConfigError naming ``env.kwargs.<what>`` and the fix otherwise).

    In a scheduler's job, only code its operator allowed is imported, from the installed packages
    (no folder goes on ``sys.path``): :func:`tinker_core.check_import` refuses anything else with
    :class:`~tinker_core.import_policy.ImportRefused` before it is imported."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ConfigError([f"env.kwargs.{what}: {ref!r} is not 'module:attr' (e.g. 'my_agent:run')"])
    check_import(ref, f"env.kwargs.{what}")
    for folder in reversed(import_folders(path)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError([f"env.kwargs.{what}: cannot load {ref!r} ({type(e).__name__}: {e}); run from the folder that "
                           "holds the module or set env.kwargs.path to it"]) from e
    except Exception as e:  # noqa: BLE001 - the module itself is broken: a syntax error, a raise at import
        where = f" ({e.filename}, line {e.lineno})" if isinstance(e, SyntaxError) and e.filename else ""
        message = (e.msg if isinstance(e, SyntaxError) else str(e)).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError([f"env.kwargs.{what}: importing {module!r} for {ref!r} failed: {type(e).__name__}: {message}{where}; "
                           "fix the module (python -c 'import " + module + "' shows the traceback)"]) from e
    return obj


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return obj.item()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _child_main() -> None:
    """The child's side: read the episode (pickled, on stdin), run it, write ``{"result": ...}``,
    ``{"error": text}`` or ``{"bad_result": text}`` to the file the episode names."""
    adopt_orphans()  # the agent's orphaned processes stay in this tree (killed below, or by the parent)
    job = pickle.load(sys.stdin.buffer)
    for folder in reversed(job["sys_path"]):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    with contextlib.ExitStack() as policies:  # the scheduler's import policy, as in the parent
        for patterns in job["allowed_imports"]:
            policies.enter_context(enforced(ImportPolicy(patterns)))
        try:
            _child_play(job)
        finally:  # what the agent left running (a setsid grandchild too) ends with its episode
            kill_episode(os.getpid(), None, group=False)


def _child_play(job: dict[str, Any]) -> None:
    out: dict[str, Any]
    try:
        run = load_ref(job["entry"], "entry", job["path"])
        import openai

        client = openai.OpenAI(base_url=job["base_url"], api_key=job["api_key"], max_retries=0, timeout=job["timeout_s"])
        try:
            result = run(job["task"], client)
        finally:
            client.close()
    except BaseException as e:  # noqa: BLE001 - the agent's failure, reported as its episode's
        out = {"error": "".join(traceback.format_exception_only(e)).strip()}
    else:
        try:
            out = {"result": json.loads(json.dumps(result, default=_json_default, allow_nan=True))}
        except (TypeError, ValueError) as e:
            out = {"bad_result": f"with isolation: process, run must return a JSON-serialisable result, got "
                                 f"{type(result).__name__} ({type(e).__name__}: {e}); return a number or a dict"}
    Path(job["out"]).write_text(json.dumps(out))
    sys.stdout.flush()
    sys.stderr.flush()


class ProcessPlay:
    """One episode's child process (``isolation: process``): :meth:`start` it, :meth:`stop` it at
    the deadline, then :meth:`outcome` says how it ended."""

    def __init__(self, entry: str, path: str | None, task: Any, api_key: str, base_url: str, timeout_s: float,
                 out: Path) -> None:
        self.out = out
        self.job = {"entry": entry, "path": path, "task": task, "api_key": api_key, "base_url": base_url,
                    "timeout_s": timeout_s, "out": str(out), "sys_path": [p for p in sys.path if p],
                    "allowed_imports": active_patterns()}
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed = False
        #: in the child's environment, inherited by whatever it starts: how :meth:`stop` finds them
        self.marker = secrets.token_hex(16)

    def start(self) -> None:
        """Start the child (in a session of its own, so :meth:`stop` ends its children too)."""
        try:
            payload = pickle.dumps(self.job)
        except Exception as e:  # noqa: BLE001 - a task the child cannot receive
            raise ConfigError([f"env.kwargs.tasks: with isolation: process each task is sent to a child process and "
                               f"must be picklable ({type(e).__name__}: {e}); use plain data (dicts, lists, str)"]) from e
        # -P: not the working directory on sys.path; the child gets this process's (and load_ref's)
        self.proc = subprocess.Popen([sys.executable, "-P", "-c", _CHILD], stdin=subprocess.PIPE, cwd=os.getcwd(),
                                     start_new_session=True, env={**os.environ, MARKER_VAR: self.marker})
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(payload)
            self.proc.stdin.close()
        except BrokenPipeError:  # the child already died; outcome() says how
            pass

    def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the child to exit."""
        assert self.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=max(seconds, 0.0))

    def stop(self) -> None:
        """Kill the child if it still runs and every process the episode started (its group, its
        descendants, whatever carries its marker: :func:`~tinker_algos.rollout.process_tree.kill_episode`),
        and reap the child."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.killed = True
        kill_episode(self.proc.pid, self.marker)  # before the reap: the child's id is not reused meanwhile
        self.proc.wait()
        kill_episode(None, self.marker)  # what the child's last moments started

    def outcome(self) -> tuple[bool, Any, str | None, str]:
        """``(finished, result, reason, detail)``: ``finished`` is False for a killed child;
        ``reason`` is None for a result, else ``agent_error``, ``agent_crash`` or ``agent_bad_result``."""
        assert self.proc is not None
        if self.killed:
            return False, None, None, ""
        code = self.proc.returncode
        report = json.loads(self.out.read_text()) if self.out.exists() else None
        if report is None or code != 0:
            if code is not None and code < 0:
                try:
                    how = f"was killed by signal {signal.Signals(-code).name} ({code})"
                except ValueError:
                    how = f"was killed by signal {-code}"
            else:
                how = f"exited with code {code}"
            done = " after run returned" if report is not None else ""
            return True, None, "agent_crash", f"the agent's process {how}{done}"
        if "error" in report:
            return True, None, "agent_error", report["error"]
        if "bad_result" in report:
            return True, None, "agent_bad_result", report["bad_result"]
        return True, report["result"], None, ""
