"""ModelHost in-process: shared base model, per-session adapters, fairness and isolation.

The host class is the same one the scheduler runs as a Ray actor; here it runs in the test
process so the checks are fast and exact.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tinker_scheduler import host_ops as ops  # noqa: E402
from tinker_scheduler.errors import StatusError  # noqa: E402
from tinker_scheduler.model_host import ModelHost, SessionSpec  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def fails(code: str, fn: Any) -> str:
    """The message of the StatusError with ``code`` that ``fn()`` raises."""
    with pytest.raises(StatusError) as e:
        fn()
    assert e.value.code == code, e.value
    return str(e.value)


def datum(seq: list[int], prompt_len: int, advantage: float = 1.0, sampling: float = -1.0) -> dict[str, Any]:
    """A Tinker-aligned datum over ``seq``: tokens seq[:-1], targets seq[1:], loss on the completion."""
    T = len(seq) - 1
    w = np.array([0.0] * (prompt_len - 1) + [1.0] * (T - prompt_len + 1), dtype=np.float32)
    return {
        "tokens": np.array(seq[:-1]), "target_tokens": np.array(seq[1:]), "loss_weights": w,
        "advantages": w * advantage, "sampling_logprobs": w * sampling,
    }


DATA = [datum([1, 20, 21, 22, 30, 31, 2], 4), datum([1, 40, 41, 50, 51, 52], 3, advantage=-0.5)]


def script(host: ModelHost, sid: str, steps: int = 3) -> tuple[list[float], list[list[int]], dict[str, np.ndarray]]:
    """A small training loop of one session: sample, importance_sampling step, repeated."""
    losses: list[float] = []
    samples: list[list[int]] = []
    for _ in range(steps):
        out = host.call(sid, ops.Sample([[1, 20, 21]], {"max_tokens": 4}, num_samples=2))
        samples += [s["tokens"] for s in out[0]]
        fb = host.call(sid, ops.ForwardBackward(DATA, "importance_sampling"))
        losses.append(fb.metrics["loss"])
        host.call(sid, ops.OptimStep({"learning_rate": 1e-2}))
    weights = host.call(sid, ops.GetWeights("", trainable_only=True))
    return losses, samples, weights


def test_two_interleaved_sessions_match_each_session_alone():
    alone = {}
    for sid, seed in (("a", 1), ("b", 2)):
        host = ModelHost("tiny", device="cpu")
        host.add_session(SessionSpec(sid, lora_rank=4, seed=seed))
        alone[sid] = script(host, sid)
        host.close()

    shared = ModelHost("tiny", device="cpu")
    shared.add_session(SessionSpec("a", lora_rank=4, seed=1))
    shared.add_session(SessionSpec("b", lora_rank=4, seed=2))
    results: dict[str, Any] = {}
    threads = [threading.Thread(target=lambda s=s: results.__setitem__(s, script(shared, s))) for s in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shared.close()
    assert set(shared.served) == {"a", "b"}
    for sid in ("a", "b"):
        losses, samples, weights = results[sid]
        assert losses == alone[sid][0]  # bit-identical
        assert samples == alone[sid][1]
        assert weights.keys() == alone[sid][2].keys()
        for name, value in weights.items():
            np.testing.assert_array_equal(value, alone[sid][2][name])
    assert results["a"][0] != results["b"][0]  # different seeds really differ


def wait_until(condition, what: str, limit_s: float = 60.0) -> None:
    """Poll ``condition`` (a safety limit only: nothing is timed)."""
    end = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.005)


def test_round_robin_serves_a_waiting_session_between_requests_of_a_busy_one():
    host = ModelHost("tiny", device="cpu")
    for sid in ("busy", "other"):
        host.add_session(SessionSpec(sid, lora_rank=2))
    # a long request of "busy" holds the executor while both queues fill up
    running, release = threading.Event(), threading.Event()
    long = host.executor.submit("busy", lambda: (running.set(), release.wait(60)))
    assert running.wait(60)
    backlog = [threading.Thread(target=lambda: host.call("busy", ops.Info())) for _ in range(4)]
    for t in backlog:
        t.start()
    wait_until(lambda: host.executor.pending("busy") == 4, "busy's backlog queued")
    other = threading.Thread(target=lambda: host.call("other", ops.Info()))
    other.start()
    wait_until(lambda: host.executor.pending("other") == 1, "other's request queued")
    release.set()
    long.result(timeout=60)
    for t in [*backlog, other]:
        t.join(60)
    # "other" ran right after at most one more "busy" request, not after the whole backlog
    assert host.served == ["busy", "busy", "other", "busy", "busy", "busy"]
    host.close()


def test_a_sequence_longer_than_the_context_is_refused_before_it_takes_a_turn():
    host = ModelHost("tiny", device="cpu")
    host.add_session(SessionSpec("s", lora_rank=2))
    n = host.context_length
    assert n == host.policy.base_model.config.max_position_embeddings
    assert host.call("s", ops.Info()).context_length == n
    too_long = datum(list(range(3, 3 + n + 1)), 2)  # n tokens + the last target: one over
    for op in (ops.ForwardBackward, ops.Forward):
        bad = fails("INVALID_ARGUMENT", lambda op=op: host.call("s", op([DATA[0], too_long], "cross_entropy")))
        assert f"data[1]: tokens plus the last target of {n + 1} tokens" in bad
    bad = fails("INVALID_ARGUMENT", lambda: host.call("s", ops.Sample([[1] * (n - 3)], {"max_tokens": 4}, num_samples=1)))
    assert f"context length of {n}" in bad
    bad = fails("INVALID_ARGUMENT", lambda: host.call("s", ops.ComputeLogprobs([[1] * (n + 1)])))
    assert "sequences[0]" in bad
    assert host.served == ["s"]  # only "info" ran
    host.close()


def test_forward_backward_accumulates_until_optim_step_and_token_sum_adds_up():
    host = ModelHost("tiny", device="cpu")
    host.add_session(SessionSpec("s", lora_rank=4, seed=0))
    whole = host.call("s", ops.ForwardBackward(DATA, "cross_entropy"))
    g_whole = [p.grad.clone() for p in host._slots["s"].trainer.params]
    host._slots["s"].trainer.zero_grad()
    parts = [host.call("s", ops.ForwardBackward([d], "cross_entropy")) for d in DATA]
    g_parts = [p.grad for p in host._slots["s"].trainer.params]
    assert whole.metrics["loss"] == pytest.approx(sum(p.metrics["loss"] for p in parts), rel=1e-5)
    for a, b in zip(g_whole, g_parts, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # cross_entropy is the sum of -logprob over weighted targets; outputs are per target token
    lps = whole.logprobs
    assert [len(x) for x in lps] == [len(d["tokens"]) for d in DATA]
    expected = -sum(float(np.dot(d["loss_weights"], lp)) for d, lp in zip(DATA, lps, strict=True))
    assert whole.metrics["loss"] == pytest.approx(expected, rel=1e-5)
    step = host.call("s", ops.OptimStep({"learning_rate": 1e-3}))
    assert step.step == 1
    again = fails("FAILED_PRECONDITION", lambda: host.call("s", ops.OptimStep({"learning_rate": 1e-3})))
    assert "ForwardBackward" in again
    host.close()


def test_ppo_takes_tinkers_threshold_keys_and_bad_input_is_named():
    host = ModelHost("tiny", device="cpu")
    host.add_session(SessionSpec("s", lora_rank=2))
    data = [datum([1, 20, 21, 22, 30], 3, advantage=1.0, sampling=-9.0)]  # ratio >> 1.2: clipped
    lp = host.call("s", ops.Forward(data)).logprobs[0]
    res = host.call("s", ops.Forward(data, "ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}))
    w = data[0]["loss_weights"]
    # with A = 1 and rho > 1.1 everywhere on the mask: l = -min(rho, 1.1) = -1.1 per token
    assert all(np.exp(np.array(lp)[w > 0] + 9.0) > 1.1)
    assert res.metrics["loss"] == pytest.approx(-1.1 * w.sum(), rel=1e-5)
    bad = fails("INVALID_ARGUMENT", lambda: host.call("s", ops.ForwardBackward(data, "ppo", {"clip_lo": 0.9})))
    assert "clip_lo" in bad
    unknown = fails("INVALID_ARGUMENT", lambda: host.call("s", ops.ForwardBackward(data, "importance_samplin")))
    assert "importance_sampling" in unknown
    shifted = dict(data[0], target_tokens=np.array([5, 5, 5, 5]))
    bad = fails("INVALID_ARGUMENT", lambda: host.call("s", ops.ForwardBackward([shifted], "cross_entropy")))
    assert "target_tokens" in bad
    host.close()


def test_removing_a_session_unloads_its_adapter_and_keeps_the_others():
    host = ModelHost("tiny", device="cpu")
    host.add_session(SessionSpec("a", lora_rank=2))
    host.add_session(SessionSpec("b", lora_rank=2))
    assert len(host.policy.adapter_names) == 2
    assert host.remove_session("a") is True
    assert host.remove_session("a") is False
    assert host.policy.adapter_names == ["s-b"]
    fails("NOT_FOUND", lambda: host.call("a", ops.Info()))
    host.call("b", ops.ForwardBackward(DATA, "cross_entropy"))
    host.remove_session("b")
    assert not host.policy.is_peft  # the last adapter gone: the plain base model again
    host.close()


def test_a_device_this_machine_lacks_is_one_line_per_session_and_names_model_device_for_a_job(tmp_path):
    from tinker_algos.model.device import DeviceError, resolve_device

    with pytest.raises(DeviceError) as embedded:  # what `opentinker train` and a job alone report
        resolve_device("cuda:99")
    host = ModelHost("tiny", device="cuda:99")  # the host starts, to tell each session and job why it cannot serve
    try:
        message = fails("INVALID_ARGUMENT", lambda: host.add_session({"session_id": "s", "lora_rank": 4}))
        assert message == str(embedded.value)
        assert message.startswith("device: 'cuda:99'") and "\n" not in message  # CreateSession's option
        result = host.run_job("j1", "tinker_algos.train", {"name": "j1"}, str(tmp_path / "j1"))
        assert result == {"status": "failed", "error": f"DeviceError: {embedded.value.in_config()}", "config_error": False}
        assert result["error"].startswith("DeviceError: model.device: 'cuda:99'")  # the job config's field
    finally:
        host.close()


@pytest.mark.slow
def test_a_lora_job_on_a_shared_host_with_a_device_this_machine_lacks_fails_once_naming_model_device(make_scheduler):
    import json

    from tinker_core.proto import jobs_pb2
    from tinker_scheduler.config import DEFAULT_RUNNER
    from tinker_scheduler.testing import JobStub

    config = {
        "name": "bad-device", "model": {"name": "tiny", "device": "cuda:99"}, "lora": {"rank": 4},
        "env": {"id": "echo/echo-v0"}, "algorithm": {"name": "sft", "steps": 1}, "resources": {"cpus": 1},
    }
    scheduler = make_scheduler(runner=DEFAULT_RUNNER)  # LoRA jobs go to shared model hosts (Ray actors)
    with JobStub(scheduler.address) as client:
        job_id = client.submit(json.dumps(config)).id
        list(client.watch(job_id, timeout=300))
        job = client.get(job_id)
    assert job.state == jobs_pb2.JOB_STATE_FAILED, job.reason
    assert job.reason.startswith("DeviceError: model.device: 'cuda:99'") and "\n" not in job.reason, job.reason
    assert scheduler.store.get(job_id).restarts == 0  # not retried: the host answered, it did not die


def test_a_model_the_host_cannot_load_is_one_line_per_session_and_job_not_a_dead_host(tmp_path, monkeypatch):
    # a Ray host whose constructor raised was only ever reported as "the model host died"
    # (UNAVAILABLE); the host now starts and tells each session and job why it cannot serve
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    host = ModelHost("no-such-org/no-such-model-xyz")
    try:
        message = fails("INVALID_ARGUMENT", lambda: host.add_session({"session_id": "s", "lora_rank": 4}))
        assert message.startswith("model.name ") and "no-such-model-xyz" in message and "\n" not in message
        result = host.run_job("j1", "tinker_algos.train", {"name": "j1"}, str(tmp_path / "j1"))
        assert result["status"] == "failed" and result["error"].startswith("ModelLoadError: model.name ")
    finally:
        host.close()
