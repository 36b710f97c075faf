"""TrainingService over a real in-process gRPC server: primitives, idempotence, limits,
deadlines, tenants, hosts.

Most tests keep model hosts in the test process (``training_host_backend="local"``) so they are
fast, and can count or hold a host operation (:func:`watch_op`); one test runs the hosts as Ray
actors (the default in production).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest

from tinker_core.proto import common_pb2, tensors, training_pb2, training_pb2_grpc

pytest.importorskip("torch")


def code_of(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        result = call(*args, **kwargs)
        if hasattr(result, "__next__"):
            list(result)
    return info.value.code(), info.value.details()


def stub_for(scheduler, key: str | None = None):
    channel = grpc.insecure_channel(scheduler.address)
    stub = training_pb2_grpc.TrainingServiceStub(channel)
    md = [("authorization", f"Bearer {key}")] if key else []
    return channel, stub, md


SEQ = [1, 20, 21, 22, 30, 31, 2]


def sft_datum(seq=SEQ, prompt_len=4) -> training_pb2.Datum:
    T = len(seq) - 1
    w = [0.0] * (prompt_len - 1) + [1.0] * (T - prompt_len + 1)
    return training_pb2.Datum(tokens=seq[:-1], target_tokens=seq[1:], loss_weights=w)


def create(stub, md, **kw) -> training_pb2.TrainingSession:
    req = training_pb2.CreateTrainingSessionRequest(base_model="tiny", lora_rank=kw.pop("lora_rank", 4), **kw)
    return stub.CreateSession(req, metadata=md, timeout=120)


def trainable(stub, md, sid) -> dict[str, np.ndarray]:
    return tensors.join_tensor_chunks(
        stub.GetWeights(training_pb2.GetWeightsRequest(session_id=sid, trainable_only=True), metadata=md, timeout=60)
    )


@pytest.fixture
def local_scheduler(make_scheduler):
    return make_scheduler(paused=True, training_host_backend="local")


def wait_until(condition, what: str, limit_s: float = 60.0) -> None:
    """Poll ``condition`` (a safety limit only: nothing is timed)."""
    end = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.005)


@dataclass
class WatchedOp:
    """The runs of one model host operation (by session id); with ``hold``, each run waits for
    ``release`` after setting ``started``."""

    hold: bool = False
    runs: list[str] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    host: object = None  # the ModelHost that ran it


def watch_op(monkeypatch, op: str, *, hold: bool = False) -> WatchedOp:
    """Count (and optionally hold) every run of ``ModelHost._<op>`` in this process (local hosts)."""
    from tinker_scheduler.model_host import ModelHost

    real = getattr(ModelHost, f"_{op}")
    watched = WatchedOp(hold=hold)

    def run(self, slot, request):
        watched.runs.append(slot.spec.session_id)
        watched.host = self
        watched.started.set()
        if watched.hold:
            assert watched.release.wait(60), "the test never released the held operation"
        return real(self, slot, request)

    monkeypatch.setattr(ModelHost, f"_{op}", run)
    return watched


def test_primitives_cross_entropy_is_a_token_sum_and_an_optim_step_applies_the_gradients(local_scheduler):
    channel, stub, md = stub_for(local_scheduler)
    with channel:
        session = create(stub, md, seed=3, request_id="create-1")
        again = create(stub, md, seed=3, request_id="create-1")
        assert again.session_id == session.session_id  # CreateSession is idempotent too
        sid = session.session_id
        assert session.info.base_model == "tiny" and session.info.lora_rank == 4 and session.info.step == 0
        assert session.info.model_type == "llama" and session.info.trainable_parameters > 0
        assert session.info.context_length == 1024  # the tiny preset's max_position_embeddings

        d = sft_datum()
        fb = stub.ForwardBackward(training_pb2.ForwardBackwardRequest(
            session_id=sid, request_id="fb-1", data=[d], loss_fn="cross_entropy"), metadata=md, timeout=60)
        lp = np.array(fb.outputs[0].logprobs)
        assert lp.shape == (len(d.tokens),) and (lp < 0).all()
        assert fb.metrics["loss:sum"] == pytest.approx(-float(np.dot(d.loss_weights, lp)), rel=1e-5)

        before = trainable(stub, md, sid)
        step = training_pb2.OptimStepRequest(session_id=sid, request_id="step-1",
                                             adam=training_pb2.AdamParams(learning_rate=1e-2))
        assert stub.OptimStep(step, metadata=md, timeout=60).step == 1
        after = trainable(stub, md, sid)
        assert any(not np.array_equal(before[k], after[k]) for k in before)
        info_now = stub.GetInfo(training_pb2.GetInfoRequest(session_id=sid), metadata=md, timeout=10)
        assert info_now.step == 1 and info_now.context_length == 1024
        # no gradients left: a *new* OptimStep is a precondition failure, naming the fix
        code, details = code_of(stub.OptimStep, training_pb2.OptimStepRequest(
            session_id=sid, request_id="step-2", adam=training_pb2.AdamParams(learning_rate=1e-2)), metadata=md)
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "ForwardBackward" in details


def test_a_retry_while_the_first_attempt_runs_waits_for_its_answer_and_the_step_applies_once(local_scheduler, monkeypatch):
    channel, stub, md = stub_for(local_scheduler)
    with channel:
        sid = create(stub, md, seed=3).session_id
        stub.ForwardBackward(training_pb2.ForwardBackwardRequest(
            session_id=sid, request_id="fb-1", data=[sft_datum()], loss_fn="cross_entropy"), metadata=md, timeout=60)
        before = trainable(stub, md, sid)
        steps = watch_op(monkeypatch, "optim_step", hold=True)
        step = training_pb2.OptimStepRequest(session_id=sid, request_id="step-1",
                                             adam=training_pb2.AdamParams(learning_rate=1e-2))
        first = stub.OptimStep.future(step, metadata=md, timeout=120)
        assert steps.started.wait(60)  # the first attempt runs on the host ...
        first.cancel()  # ... when its client gives up (to the server, a timeout or a lost connection look the same)
        retry = stub.OptimStep.future(step, metadata=md, timeout=120)
        session = local_scheduler.training._sessions[sid]
        wait_until(lambda: session.joined == 1, "the retry waits for the running first attempt")
        steps.release.set()
        assert retry.result().step == 1  # the first attempt's answer
        assert stub.OptimStep(step, metadata=md, timeout=60).step == 1  # a later retry: the same answer
        assert steps.runs == [sid]  # applied once
        assert stub.GetInfo(training_pb2.GetInfoRequest(session_id=sid), metadata=md, timeout=10).step == 1
        after = trainable(stub, md, sid)
        assert any(not np.array_equal(before[k], after[k]) for k in before)


def test_a_request_id_names_one_request_its_method_and_arguments(local_scheduler, monkeypatch):
    channel, stub, md = stub_for(local_scheduler)
    with channel:
        sid = create(stub, md, seed=3, request_id="create-1").session_id
        code, details = code_of(stub.CreateSession, training_pb2.CreateTrainingSessionRequest(
            base_model="tiny", lora_rank=4, seed=4, request_id="create-1"), metadata=md)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "request_id: 'create-1'" in details
        runs = watch_op(monkeypatch, "forward_backward")
        fb = training_pb2.ForwardBackwardRequest(session_id=sid, request_id="fb-1", data=[sft_datum()],
                                                 loss_fn="cross_entropy", loss_config={})
        first = stub.ForwardBackward(fb, metadata=md, timeout=60)
        again = stub.ForwardBackward(fb, metadata=md, timeout=60)
        assert again == first and runs.runs == [sid]  # one execution, the same answer
        other_args = training_pb2.ForwardBackwardRequest(session_id=sid, request_id="fb-1", data=[sft_datum(prompt_len=2)],
                                                         loss_fn="cross_entropy")
        other_method = training_pb2.ForwardRequest(session_id=sid, request_id="fb-1", data=[sft_datum()], loss_fn="cross_entropy")
        for method, request in ((stub.ForwardBackward, other_args), (stub.Forward, other_method)):
            code, details = code_of(method, request, metadata=md)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, details
            assert "request_id: 'fb-1' was already used for another request" in details and "\n" not in details
        assert runs.runs == [sid]  # neither ran
        assert stub.ForwardBackward(fb, metadata=md, timeout=60) == first  # the first answer is kept


def test_requests_over_the_limits_are_refused_before_they_reach_the_host(local_scheduler, monkeypatch):
    from tinker_algos.tinker_ops import RequestLimits

    limits = RequestLimits()
    channel, stub, md = stub_for(local_scheduler)
    with channel:
        sid = create(stub, md).session_id
        ops = [watch_op(monkeypatch, op) for op in ("forward_backward", "forward", "sample", "compute_logprobs")]
        context = 1024  # the tiny preset's max_position_embeddings
        long_seq = list(range(3, 3 + context + 1))  # tokens + the last target: one over the context
        def tok(n: int) -> common_pb2.TokenList:
            return common_pb2.TokenList(tokens=[5] * n)
        sp = training_pb2.SamplingParams
        cases = [
            (stub.ForwardBackward, training_pb2.ForwardBackwardRequest(
                session_id=sid, data=[sft_datum(), sft_datum(long_seq)], loss_fn="cross_entropy"),
             f"data[1]: tokens plus the last target of {context + 1} tokens exceeds the model's context length of {context} tokens"),
            # the probe that froze a shared host for 15 minutes: one 100,000-token sequence
            (stub.ForwardBackward, training_pb2.ForwardBackwardRequest(
                session_id=sid, data=[sft_datum(list(range(100_001)))], loss_fn="cross_entropy"),
             f"data[0]: tokens plus the last target of 100001 tokens exceeds the model's context length of {context} tokens"),
            (stub.Forward, training_pb2.ForwardRequest(session_id=sid, data=[sft_datum()] * (limits.max_data + 1)),
             f"data: {limits.max_data + 1} data in one request, over the limit of {limits.max_data}"),
            (stub.ForwardBackward, training_pb2.ForwardBackwardRequest(
                session_id=sid, data=[sft_datum(list(range(3, 3 + 1001)))] * 70, loss_fn="cross_entropy"),
             f"data: 70070 tokens in one request, over the limit of {limits.max_tokens}"),
            (stub.Sample, training_pb2.SampleRequest(session_id=sid, prompts=[tok(1000)], sampling_params=sp(max_tokens=100)),
             f"prompts[0]: 1000 prompt tokens + sampling_params.max_tokens=100 exceed the model's context length of {context}"),
            (stub.Sample, training_pb2.SampleRequest(session_id=sid, prompts=[tok(3)], sampling_params=sp(max_tokens=limits.max_new_tokens + 1)),
             f"sampling_params.max_tokens: {limits.max_new_tokens + 1} is over the limit of {limits.max_new_tokens}"),
            (stub.Sample, training_pb2.SampleRequest(session_id=sid, prompts=[tok(3)], num_samples=limits.max_data + 1,
                                                     sampling_params=sp(max_tokens=4)),
             f"num_samples: 1 prompt(s) x {limits.max_data + 1} samples"),
            (stub.ComputeLogprobs, training_pb2.ComputeLogprobsRequest(session_id=sid, sequences=[tok(context + 1)]),
             f"sequences[0]: a sequence of {context + 1} tokens exceeds the model's context length"),
        ]
        for method, request, named in cases:
            code, details = code_of(method, request, metadata=md, timeout=60)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, details
            assert details.startswith(named) and "\n" not in details, details
        assert [o.runs for o in ops] == [[], [], [], []]  # nothing reached the host


def test_the_schedulers_request_limit_options_bound_training_requests(make_scheduler):
    scheduler = make_scheduler(paused=True, training_host_backend="local", max_data_per_request=2,
                               max_tokens_per_request=30, max_new_tokens_per_sample=5)
    channel, stub, md = stub_for(scheduler)
    with channel:
        sid = create(stub, md).session_id
        fb = training_pb2.ForwardBackwardRequest(session_id=sid, data=[sft_datum()] * 2, loss_fn="cross_entropy")
        assert len(stub.ForwardBackward(fb, metadata=md, timeout=60).outputs) == 2  # within every limit
        sample = training_pb2.SampleRequest(session_id=sid, prompts=[common_pb2.TokenList(tokens=[1, 5])],
                                            sampling_params=training_pb2.SamplingParams(max_tokens=6))
        cases = [
            (stub.Forward, training_pb2.ForwardRequest(session_id=sid, data=[sft_datum()] * 3),
             "data: 3 data in one request, over the limit of 2"),
            (stub.ForwardBackward, training_pb2.ForwardBackwardRequest(
                session_id=sid, data=[sft_datum(list(range(3, 3 + 40)))], loss_fn="cross_entropy"),
             "data: 40 tokens in one request, over the limit of 30"),
            (stub.Sample, sample, "sampling_params.max_tokens: 6 is over the limit of 5"),
        ]
        for method, request, named in cases:
            code, details = code_of(method, request, metadata=md, timeout=60)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(named), details


def test_a_session_on_a_device_this_machine_lacks_is_invalid_argument_naming_device(local_scheduler):
    channel, stub, md = stub_for(local_scheduler)
    with channel:
        code, details = code_of(stub.CreateSession, training_pb2.CreateTrainingSessionRequest(
            base_model="tiny", lora_rank=4, options_json='{"device": "cuda:99"}'), metadata=md, timeout=120)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert details.startswith("device: 'cuda:99'") and "\n" not in details, details
        assert create(stub, md).info.lora_rank == 4  # the server still creates sessions


def test_a_request_whose_client_is_gone_is_dropped_unrun_and_other_sessions_are_answered(local_scheduler, monkeypatch):
    channel, stub, md = stub_for(local_scheduler)
    with channel:
        a, b, c = (create(stub, md, seed=i).session_id for i in range(3))  # three sessions, one host
        assert local_scheduler.hosts.host_count() == 1
        fbs = watch_op(monkeypatch, "forward_backward")

        def fb(sid: str) -> training_pb2.ForwardBackwardRequest:
            return training_pb2.ForwardBackwardRequest(session_id=sid, data=[sft_datum()], loss_fn="cross_entropy")

        stub.ForwardBackward(fb(a), metadata=md, timeout=60)
        steps = watch_op(monkeypatch, "optim_step", hold=True)
        long = stub.OptimStep.future(training_pb2.OptimStepRequest(
            session_id=a, adam=training_pb2.AdamParams(learning_rate=1e-2)), metadata=md, timeout=120)
        assert steps.started.wait(60)  # session a's long request holds the host
        executor = steps.host.executor
        # b's client deadline passes while its request waits for its turn: dropped
        code, _ = code_of(stub.ForwardBackward, fb(b), metadata=md, timeout=1)
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_until(lambda: executor.pending(b) == 0, "b's expired request left the queue")
        # c's client cancels its waiting request: dropped
        gone = stub.ForwardBackward.future(fb(c), metadata=md, timeout=120)
        wait_until(lambda: executor.pending(c) == 1, "c's request queued")
        gone.cancel()
        wait_until(lambda: executor.pending(c) == 0, "c's cancelled request left the queue")
        steps.release.set()
        assert long.result().step == 1
        assert stub.ForwardBackward(fb(b), metadata=md, timeout=60).metrics["loss"] > 0  # b is answered
        assert fbs.runs == [a, b]  # the dropped requests never ran
        assert c in executor.dropped and set(executor.dropped) <= {b, c}  # b's may also stop before the queue


def test_sample_returns_tokens_logprobs_and_stop_reasons_and_save_load_restore(local_scheduler):
    channel, stub, md = stub_for(local_scheduler)
    with channel:
        sid = create(stub, md, seed=1).session_id
        req = training_pb2.SampleRequest(
            session_id=sid, prompts=[common_pb2.TokenList(tokens=[1, 20, 21])], num_samples=3,
            sampling_params=training_pb2.SamplingParams(max_tokens=5, seed=7))
        out = stub.Sample(req, metadata=md, timeout=60)
        assert len(out.results) == 1 and len(out.results[0].samples) == 3
        for s in out.results[0].samples:
            assert len(s.tokens) == len(s.logprobs) >= 1
            assert s.stop_reason in (training_pb2.STOP_REASON_LENGTH, training_pb2.STOP_REASON_STOP_TOKEN)
            assert len(s.tokens) == 5 or s.stop_reason == training_pb2.STOP_REASON_STOP_TOKEN
        again = stub.Sample(req, metadata=md, timeout=60)
        assert again == out  # same seed, same samples
        seq = [1, 20, 21, *out.results[0].samples[0].tokens]
        lps = stub.ComputeLogprobs(training_pb2.ComputeLogprobsRequest(
            session_id=sid, sequences=[common_pb2.TokenList(tokens=seq)]), metadata=md, timeout=60)
        np.testing.assert_allclose(np.array(lps.logprobs[0].values)[2:], out.results[0].samples[0].logprobs, atol=1e-4)

        saved = stub.SaveState(training_pb2.SaveStateRequest(session_id=sid, request_id="s", name="step-0"),
                               metadata=md, timeout=60).path
        w0 = trainable(stub, md, sid)
        stub.ForwardBackward(training_pb2.ForwardBackwardRequest(session_id=sid, data=[sft_datum()], loss_fn="cross_entropy"), metadata=md)
        stub.OptimStep(training_pb2.OptimStepRequest(session_id=sid, adam=training_pb2.AdamParams(learning_rate=0.05)), metadata=md)
        assert stub.LoadState(training_pb2.LoadStateRequest(session_id=sid, path=saved, with_optimizer=True), metadata=md).step == 0
        w1 = trainable(stub, md, sid)
        for k in w0:
            np.testing.assert_array_equal(w0[k], w1[k])
        code, details = code_of(stub.LoadState, training_pb2.LoadStateRequest(session_id=sid, path="/etc"), metadata=md)
        assert code == grpc.StatusCode.NOT_FOUND and "SaveState" in details
        tok = tensors.join_tensor_chunks(stub.GetWeights(training_pb2.GetWeightsRequest(session_id=sid, path="tokenizer"), metadata=md))
        assert "tokenizer.json" in tok and tok["tokenizer.json"].dtype == np.uint8


def test_lora_sessions_of_one_base_model_share_a_host_and_full_fine_tuning_gets_its_own(local_scheduler):
    channel, stub, md = stub_for(local_scheduler)
    hosts = local_scheduler.hosts
    with channel:
        a = create(stub, md).session_id
        b = create(stub, md, lora_rank=2).session_id
        assert hosts.host_count() == 1
        full = create(stub, md, lora_rank=0)
        assert hosts.host_count() == 2 and full.info.lora_rank == 0
        stub.CloseSession(training_pb2.CloseTrainingSessionRequest(session_id=a), metadata=md)
        stub.CloseSession(training_pb2.CloseTrainingSessionRequest(session_id=a), metadata=md)  # idempotent
        code, _ = code_of(stub.GetInfo, training_pb2.GetInfoRequest(session_id=a), metadata=md)
        assert code == grpc.StatusCode.NOT_FOUND
        assert stub.GetInfo(training_pb2.GetInfoRequest(session_id=b), metadata=md).lora_rank == 2


def test_bad_requests_name_the_field(local_scheduler):
    channel, stub, md = stub_for(local_scheduler)
    with channel:
        sid = create(stub, md).session_id
        cases = [
            (stub.CreateSession, training_pb2.CreateTrainingSessionRequest(base_model="", lora_rank=4), "base_model"),
            (stub.CreateSession, training_pb2.CreateTrainingSessionRequest(base_model="tiny", options_json='{"dtype": 1}'), "options_json"),
            (stub.ForwardBackward, training_pb2.ForwardBackwardRequest(session_id=sid, data=[sft_datum()], loss_fn="cross_entropi"), "cross_entropy"),
            (stub.ForwardBackward, training_pb2.ForwardBackwardRequest(session_id=sid, data=[], loss_fn="cross_entropy"), "data"),
            (stub.Sample, training_pb2.SampleRequest(session_id=sid, prompts=[common_pb2.TokenList(tokens=[1])]), "max_tokens"),
            (stub.SaveState, training_pb2.SaveStateRequest(session_id=sid, name="../escape"), "name"),
        ]
        for method, request, field in cases:
            code, details = code_of(method, request, metadata=md)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (field, details)
            assert field in details, details


def test_a_tenant_cannot_see_another_tenants_session(local_scheduler):
    alice = local_scheduler.store.add_tenant("alice")
    bob = local_scheduler.store.add_tenant("bob")
    channel, stub, md_a = stub_for(local_scheduler, alice)
    with channel:
        sid = create(stub, md_a).session_id
        md_b = [("authorization", f"Bearer {bob}")]
        for method, request in [
            (stub.GetInfo, training_pb2.GetInfoRequest(session_id=sid)),
            (stub.ForwardBackward, training_pb2.ForwardBackwardRequest(session_id=sid, data=[sft_datum()], loss_fn="cross_entropy")),
            (stub.GetWeights, training_pb2.GetWeightsRequest(session_id=sid)),
        ]:
            code, details = code_of(method, request, metadata=md_b)
            assert code == grpc.StatusCode.NOT_FOUND and sid in details
        stub.CloseSession(training_pb2.CloseTrainingSessionRequest(session_id=sid), metadata=md_b)  # no effect
        assert stub.GetInfo(training_pb2.GetInfoRequest(session_id=sid), metadata=md_a).lora_rank == 4
        code, _ = code_of(stub.GetInfo, training_pb2.GetInfoRequest(session_id=sid))
        assert code == grpc.StatusCode.UNAUTHENTICATED


def test_an_idle_session_is_checkpointed_released_and_restored_on_its_next_request(make_scheduler):
    scheduler = make_scheduler(paused=True, training_host_backend="local", session_idle_timeout_s=0.3,
                               host_idle_timeout_s=0.3)
    channel, stub, md = stub_for(scheduler)
    with channel:
        sid = create(stub, md, seed=5).session_id
        stub.ForwardBackward(training_pb2.ForwardBackwardRequest(session_id=sid, data=[sft_datum()], loss_fn="cross_entropy"), metadata=md)
        stub.OptimStep(training_pb2.OptimStepRequest(session_id=sid, adam=training_pb2.AdamParams(learning_rate=0.05)), metadata=md)
        w_before = trainable(stub, md, sid)
        session = scheduler.training._sessions[sid]
        deadline = time.monotonic() + 60
        while (session.state != "released" or scheduler.hosts.host_count()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session.state == "released" and scheduler.hosts.host_count() == 0
        info = stub.GetInfo(training_pb2.GetInfoRequest(session_id=sid), metadata=md)
        assert info.step == 1 and session.state == "active"
        w_after = trainable(stub, md, sid)
        for k in w_before:
            np.testing.assert_array_equal(w_before[k], w_after[k])


def test_sessions_on_a_ray_model_host(make_scheduler):
    scheduler = make_scheduler(paused=True, training_host_cpus=1)
    channel, stub, md = stub_for(scheduler)
    with channel:
        health = __import__("grpc_health.v1.health_pb2", fromlist=["x"])
        health_grpc = __import__("grpc_health.v1.health_pb2_grpc", fromlist=["x"])
        status = health_grpc.HealthStub(channel).Check(health.HealthCheckRequest(service="opentinker.v1.TrainingService"))
        assert status.status == health.HealthCheckResponse.SERVING
        a = create(stub, md, seed=1).session_id
        b = create(stub, md, seed=2).session_id
        assert scheduler.hosts.host_count() == 1
        assert scheduler.hosts.reserved().cpus == 1  # jobs see one CPU less
        for sid in (a, b):
            fb = stub.ForwardBackward(training_pb2.ForwardBackwardRequest(
                session_id=sid, data=[sft_datum()], loss_fn="cross_entropy"), metadata=md, timeout=120)
            assert fb.metrics["loss"] > 0
            assert stub.OptimStep(training_pb2.OptimStepRequest(
                session_id=sid, adam=training_pb2.AdamParams(learning_rate=1e-2)), metadata=md).step == 1
        wa, wb = trainable(stub, md, a), trainable(stub, md, b)
        assert all(k.endswith(".weight") for k in wa) and wa.keys().isdisjoint(wb.keys())
        # idempotence and limits on a Ray host: the same request id and arguments apply once,
        # other arguments are refused, and an over-long datum never reaches the host
        stub.ForwardBackward(training_pb2.ForwardBackwardRequest(session_id=a, data=[sft_datum()], loss_fn="cross_entropy"), metadata=md)
        step = training_pb2.OptimStepRequest(session_id=a, request_id="ray-step", adam=training_pb2.AdamParams(learning_rate=1e-2))
        assert [stub.OptimStep(step, metadata=md, timeout=60).step for _ in range(2)] == [2, 2]
        assert stub.GetInfo(training_pb2.GetInfoRequest(session_id=a), metadata=md).step == 2
        step.adam.learning_rate = 1e-3
        code, details = code_of(stub.OptimStep, step, metadata=md)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "ray-step" in details
        code, details = code_of(stub.Forward, training_pb2.ForwardRequest(
            session_id=b, data=[sft_datum(list(range(3, 3 + 1025)))]), metadata=md)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "context length of 1024" in details


def test_a_tenant_with_two_sessions_gets_one_turn_per_round_not_two(local_scheduler, monkeypatch):
    """alice's two sessions and bob's one wait for the host (held by carol's request): bob's request
    runs second, after one of alice's, not after both (the host's turns go round tenants, then
    sessions)."""
    alice, bob, carol = (local_scheduler.store.add_tenant(name) for name in ("alice", "bob", "carol"))
    channel, stub, md_a = stub_for(local_scheduler, alice)
    md_b, md_c = ([("authorization", f"Bearer {key}")] for key in (bob, carol))
    with channel:
        a1, a2 = (create(stub, md_a, seed=i).session_id for i in range(2))
        b1 = create(stub, md_b).session_id
        c1 = create(stub, md_c).session_id
        assert local_scheduler.hosts.host_count() == 1
        stub.ForwardBackward(training_pb2.ForwardBackwardRequest(  # a gradient for carol's step
            session_id=c1, data=[sft_datum()], loss_fn="cross_entropy"), metadata=md_c, timeout=60)
        fbs = watch_op(monkeypatch, "forward_backward")
        steps = watch_op(monkeypatch, "optim_step", hold=True)
        long = stub.OptimStep.future(training_pb2.OptimStepRequest(
            session_id=c1, adam=training_pb2.AdamParams(learning_rate=1e-2)), metadata=md_c, timeout=120)
        assert steps.started.wait(60)  # carol's request holds the host while the others queue
        executor = steps.host.executor

        def fb(sid: str, md: list[tuple[str, str]]) -> grpc.Future:
            request = training_pb2.ForwardBackwardRequest(session_id=sid, data=[sft_datum()], loss_fn="cross_entropy")
            future = stub.ForwardBackward.future(request, metadata=md, timeout=120)
            wait_until(lambda: executor.pending(sid) == 1, f"{sid}'s request queued")
            return future

        waiting = [fb(a1, md_a), fb(a2, md_a), fb(b1, md_b)]  # alice's two first, bob's last
        steps.release.set()
        assert long.result().step == 1
        assert all(f.result().metrics["loss"] > 0 for f in waiting)
        assert fbs.runs == [a1, b1, a2]  # per session it would be [a1, a2, b1]
