"""Issue 12's joint acceptance test: one hostile request cannot freeze a shared server, and
SIGTERM stops both servers whatever is in flight.

A scheduler (``python -m tinker_scheduler start``: the TrainingService with its model hosts as
Ray actors) and ``opentinker env serve`` run as their own processes. Two threads keep sending
the two probes that froze them before issue 12 -- a ``ForwardBackward`` of one 100,000-token
sequence to a LoRA session on the shared model host, and a ``Step`` with a 50 MB numeric action
to ``math/arithmetic-v0`` -- while other sessions on the same host and env server keep working:
a one-datum ``ForwardBackward`` on another LoRA session of the same base model, and ``Step``s of
``echo/echo-v0`` and ``math/arithmetic-v0`` sessions. Every call of the other sessions must
answer OK before and during the probes, and the probes must get their clear refusals. Then both
servers get SIGTERM with the probes still being sent, and must exit (status 0).

Nothing is timed in the assertions (this machine's two cores are shared): the latencies of the
other sessions, alone and during the probes, and the time each server took to exit after
SIGTERM are printed (run with ``-s``) and kept as test properties; ``docs/reliability.md``
quotes them. Only generous hang-guards fail the test.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

pytest.importorskip("tinker_scheduler", reason="needs tinker-scheduler (the integration session installs it)")
pytest.importorskip("tinker_env_math", reason="needs tinker-env-math (the 50 MB action goes to math/arithmetic-v0)")

from tinker_core.proto import env_pb2, env_pb2_grpc, training_pb2, training_pb2_grpc  # noqa: E402

pytestmark = pytest.mark.slow

HANG_GUARD_S = 300.0  # no step of this test may take longer (none is timed otherwise)
CALLS_ALONE = 20  # calls of each other session before the probes
MIN_CALLS_DURING = 20  # calls of each other session while the probes are sent, at least
MIN_PROBES = 3  # each probe is sent at least this often while the others are measured
BIG_TOKENS = 100_000
BIG_ACTION = "7" * 50_000_000
SEQ = [1, 20, 21, 22, 30, 31, 2]


def _env() -> dict[str, str]:
    ray_tmp = Path(tempfile.gettempdir()) / "ot-acceptance-ray"
    ray_tmp.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1",
        "RAY_TMPDIR": str(ray_tmp), "OPENTINKER_LOAD_PLUGINS": "tinker-algos,tinker-env-echo,tinker-env-math",
    }


class Server:
    """A server process in its own session (its Ray too), its output in ``log``; ready once
    ``pattern`` appears in the log (the match's first group is its address)."""

    def __init__(self, command: list[str], log: Path, pattern: str) -> None:
        self.log = log
        with open(log, "w") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=_env())
        deadline = time.monotonic() + HANG_GUARD_S
        while (match := re.search(pattern, log.read_text())) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"{command[2]} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        self.address = match.group(1)

    def terminate(self) -> tuple[int, float]:
        """SIGTERM; the exit status and the seconds until the process ended."""
        start = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit {HANG_GUARD_S:.0f} s after SIGTERM:\n{self.log.read_text()[-3000:]}")
        return code, time.monotonic() - start

    def kill(self) -> None:
        """Kill whatever is left of the process's session (a scheduler's Ray processes)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@pytest.fixture
def servers(tmp_path) -> Iterator[tuple[Server, Server]]:
    started: list[Server] = []
    try:
        started.append(Server(
            [sys.executable, "-m", "tinker_scheduler", "start", "--port", "0", "--db", str(tmp_path / "jobs.db"),
             "--runs-dir", str(tmp_path / "runs"), "--metrics-port", "-1", "--num-cpus", "2", "--auth", "none"],
            tmp_path / "scheduler.log", r"listening on (\S+)",
        ))
        started.append(Server(
            [sys.executable, "-m", "tinker_client.cli", "env", "serve", "math/arithmetic-v0", "echo/echo-v0", "--port", "0"],
            tmp_path / "env-serve.log", r"serving .* on (\S+) \(Ctrl-C stops\)",
        ))
        yield started[0], started[1]
    finally:
        for server in started:
            server.kill()


def _datum(seq: list[int]) -> training_pb2.Datum:
    return training_pb2.Datum(tokens=seq[:-1], target_tokens=seq[1:], loss_weights=[1.0] * (len(seq) - 1))


def _code(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    except ValueError:  # the test closed the channel
        return grpc.StatusCode.CANCELLED, "channel closed"
    return grpc.StatusCode.OK, ""


class Probe(threading.Thread):
    """Sends one hostile request again and again until ``stop``; keeps every answer's status."""

    def __init__(self, send: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.send = send
        self.stop = threading.Event()
        self.answers: list[tuple[grpc.StatusCode, str]] = []
        self.in_flight = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.in_flight.set()
            self.answers.append(_code(self.send))


def _timed(calls: Callable[[], None], n: int | None = None, until: Callable[[], bool] | None = None) -> list[float]:
    """Milliseconds of each ``calls()``: ``n`` of them, or until ``until()`` (and ``MIN_CALLS_DURING``)."""
    out: list[float] = []
    deadline = time.monotonic() + HANG_GUARD_S
    while (len(out) < n) if n is not None else (len(out) < MIN_CALLS_DURING or not until()):  # type: ignore[misc]
        assert time.monotonic() < deadline, "the other sessions' calls never finished"
        start = time.perf_counter()
        calls()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _summary(ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return f"n={len(ms)} p50={statistics.median(ms):.1f} ms p99={q[98]:.1f} ms max={max(ms):.1f} ms"


def test_other_sessions_answer_while_the_hostile_probes_run_and_sigterm_stops_both_servers(servers, record_property):
    scheduler, env_server = servers
    train_channel = grpc.insecure_channel(scheduler.address)
    env_channel = grpc.insecure_channel(env_server.address)
    probes: list[Probe] = []
    keep_going: list[threading.Thread] = []
    finish = threading.Event()
    try:
        grpc.channel_ready_future(train_channel).result(timeout=HANG_GUARD_S)
        grpc.channel_ready_future(env_channel).result(timeout=HANG_GUARD_S)
        trainer = training_pb2_grpc.TrainingServiceStub(train_channel)
        envs = env_pb2_grpc.EnvServiceStub(env_channel)

        # two LoRA sessions on one shared model host (a Ray actor of the scheduler)
        def session(seed: int) -> training_pb2.TrainingSession:
            request = training_pb2.CreateTrainingSessionRequest(base_model="tiny", lora_rank=4, seed=seed,
                                                                options_json='{"device": "cpu"}')
            return trainer.CreateSession(request, timeout=HANG_GUARD_S)

        hostile_session, other_session = session(1), session(2)
        context = other_session.info.context_length
        assert context and context < BIG_TOKENS  # the tiny preset's 1024: the probe is over it

        def env_session(env_id: str) -> str:
            sid = envs.CreateSession(env_pb2.CreateEnvSessionRequest(env_id=env_id), timeout=HANG_GUARD_S).session_id
            envs.Reset(env_pb2.ResetRequest(session_id=sid, seed=0), timeout=HANG_GUARD_S)
            return sid

        hostile_env, echo, arithmetic = env_session("math/arithmetic-v0"), env_session("echo/echo-v0"), env_session("math/arithmetic-v0")

        def train_call() -> None:
            fb = trainer.ForwardBackward(training_pb2.ForwardBackwardRequest(
                session_id=other_session.session_id, data=[_datum(SEQ)], loss_fn="cross_entropy"), timeout=HANG_GUARD_S)
            assert len(fb.outputs) == 1

        def env_call() -> None:
            for sid, action in ((echo, "hello"), (arithmetic, "#### 12")):
                step = envs.Step(env_pb2.StepRequest(session_id=sid, action=action), timeout=HANG_GUARD_S)
                if step.terminated or step.truncated:
                    envs.Reset(env_pb2.ResetRequest(session_id=sid), timeout=HANG_GUARD_S)

        # the other sessions alone
        alone = {"train": _timed(train_call, CALLS_ALONE), "env": _timed(env_call, CALLS_ALONE)}

        # the probes: sent over and over from their own threads
        big = training_pb2.ForwardBackwardRequest(session_id=hostile_session.session_id, data=[_datum(list(range(BIG_TOKENS + 1)))],
                                                  loss_fn="cross_entropy")
        probes = [
            Probe(lambda: trainer.ForwardBackward(big, timeout=HANG_GUARD_S)),
            Probe(lambda: envs.Step(env_pb2.StepRequest(session_id=hostile_env, action=BIG_ACTION), timeout=HANG_GUARD_S)),
        ]
        for probe in probes:
            probe.start()
            assert probe.in_flight.wait(HANG_GUARD_S)
        counts = [len(p.answers) for p in probes]

        def probes_sent() -> bool:
            return all(len(p.answers) - c >= MIN_PROBES for p, c in zip(probes, counts, strict=True))

        during: dict[str, list[float]] = {}
        measurers = [
            threading.Thread(target=lambda: during.__setitem__("train", _timed(train_call, until=probes_sent)), daemon=True),
            threading.Thread(target=lambda: during.__setitem__("env", _timed(env_call, until=probes_sent)), daemon=True),
        ]
        for t in measurers:
            t.start()
        for t in measurers:
            t.join(HANG_GUARD_S)
        assert set(during) == {"train", "env"}, "a measuring thread failed or hung (see its exception above)"

        train_probe, env_probe = (list(p.answers) for p in probes)
        assert {code for code, _ in train_probe} == {grpc.StatusCode.INVALID_ARGUMENT}, train_probe[:3]
        assert all(f"exceeds the model's context length of {context} tokens" in text for _, text in train_probe)
        assert {code for code, _ in env_probe} <= {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT}, env_probe[:3]

        # SIGTERM both servers with the probes (and other sessions' calls) still being sent
        keep_going = [threading.Thread(target=_until, args=(finish, f), daemon=True) for f in (train_call, env_call)]
        for t in keep_going:
            t.start()
        (scheduler_code, scheduler_s), (env_code, env_s) = scheduler.terminate(), env_server.terminate()
    finally:
        finish.set()
        for probe in probes:
            probe.stop.set()
        for t in [*probes, *keep_going]:
            t.join(60)  # each ends with its call: the servers are gone (or the test failed)
        train_channel.close()
        env_channel.close()

    figures = {
        "training session alone": _summary(alone["train"]),
        "training session during probes": _summary(during["train"]),
        "env sessions alone (echo + arithmetic step)": _summary(alone["env"]),
        "env sessions during probes": _summary(during["env"]),
        "probes answered (100k-token ForwardBackward, 50 MB Step)": f"{len(train_probe)}, {len(env_probe)}",
        "scheduler exit after SIGTERM": f"{scheduler_s:.2f} s (status {scheduler_code})",
        "env serve exit after SIGTERM": f"{env_s:.2f} s (status {env_code})",
    }
    for name, value in figures.items():
        record_property(name, value)
        print(f"acceptance: {name}: {value}")
    assert scheduler_code == 0, scheduler.log.read_text()[-3000:]
    assert env_code == 0, env_server.log.read_text()[-3000:]


def _until(finish: threading.Event, call: Callable[[], None]) -> None:
    """Call ``call()`` until ``finish``; errors once the servers stop are expected."""
    while not finish.is_set():
        try:
            call()
        except (grpc.RpcError, AssertionError, ValueError):
            return
