"""Fuzzing the TrainingService over a real gRPC channel (issue 12's reliability suite).

Random sequences of TrainingService calls from two tenants and from callers without a valid key:
CreateSession with odd base models (absolute paths, '..', another tenant's session directory,
hub ids, odd LoRA settings and options), then ForwardBackward / Forward / OptimStep / Sample /
ComputeLogprobs / SaveState / LoadState / SaveWeightsForSampler / GetWeights / GetInfo /
CloseSession with random data (wrong lengths, NaN and infinite floats, negative and huge token
ids, empty and over-long sequences), unknown session ids and another tenant's session ids and
saved paths. Each call gets an answer or a clear status with a message, never UNKNOWN or
INTERNAL; no tenant reaches another tenant's session, saved state or weights; and a healthy
session still trains after each sequence.

The scheduler is real (gRPC server, job store) and paused; model hosts run in the test process
(``training_host_backend="local"``) on the tiny preset model. Bounded: a fixed number of
examples, localhost only.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from tinker_core.proto import common_pb2, tensors, training_pb2, training_pb2_grpc  # noqa: E402

CLEAR = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
}
WAIT_S = 60.0
CONTEXT = 1024  # the tiny preset's max_position_embeddings
VOCAB = 101  # and its vocabulary
SEQ = [1, 20, 21, 22, 30, 31, 2]
#: Every call's outcome (status code name) over the module, for the reliability report.
TALLY: Counter[str] = Counter()
BY_METHOD: Counter[str] = Counter()

floats = st.one_of(
    st.floats(-10, 10), st.sampled_from([0.0, 1.0, -1.0, math.nan, math.inf, -math.inf, 1e30, -1e30]),
)
token_ids = st.one_of(st.integers(0, VOCAB - 1), st.sampled_from([-1, VOCAB, -(2**31), 2**31 - 1, 1_000_000]))


@st.composite
def datums(draw: Any) -> training_pb2.Datum:
    kind = draw(st.sampled_from(["good"] * 6 + ["random", "random", "long", "empty"]))
    if kind == "good":
        seq = draw(st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=20))
        w = draw(st.one_of(st.just([1.0] * (len(seq) - 1)), st.just([1.0] * (len(seq) - 1)), st.lists(floats, min_size=len(seq) - 1, max_size=len(seq) - 1)))
        d = training_pb2.Datum(tokens=seq[:-1], target_tokens=seq[1:], loss_weights=w)
        if draw(st.booleans()):
            d.advantages.extend(draw(st.lists(floats, min_size=len(seq) - 1, max_size=len(seq) - 1)))
            d.sampling_logprobs.extend(draw(st.lists(st.floats(-5, 0), min_size=len(seq) - 1, max_size=len(seq) - 1)))
        return d
    if kind == "long":
        n = draw(st.sampled_from([CONTEXT - 1, CONTEXT, CONTEXT + 1, 100_000]))
        seq = [5] * (n + 1)
        return training_pb2.Datum(tokens=seq[:-1], target_tokens=seq[1:])
    if kind == "empty":
        return training_pb2.Datum()
    return training_pb2.Datum(
        tokens=draw(st.lists(token_ids, max_size=8)), target_tokens=draw(st.lists(token_ids, max_size=8)),
        loss_weights=draw(st.lists(floats, max_size=8)), advantages=draw(st.lists(floats, max_size=8)),
        sampling_logprobs=draw(st.lists(floats, max_size=8)),
    )


token_lists = st.one_of(
    st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12), st.lists(token_ids, max_size=8),
    st.sampled_from([[5] * CONTEXT, [5] * (CONTEXT + 1)]),
)
callers = st.sampled_from(["alice"] * 5 + ["bob"] * 3 + ["nobody", "forged"])
#: ("own", i): a session of the caller's tenant; ("any", i): of either tenant; a string: an odd id.
_pooled = st.tuples(st.sampled_from(["own", "own", "own", "any"]), st.integers(0, 10))
session_refs = st.one_of(_pooled, _pooled, _pooled, _pooled, st.text(max_size=16))
#: A saved path: an int picks one the fuzzer saw saved (either tenant's); strings are odd paths.
path_refs = st.one_of(st.integers(0, 10), st.integers(0, 10), st.sampled_from(["", "/etc", "/etc/passwd", "..", "../..", "tokenizer", "RUNS",
                                                            "RUNS/alice/sessions", "RUNS/bob/sessions/x/../..", "\x00"]))
names = st.one_of(st.sampled_from(["s1", "s2", "step-000001", "../escape", "/abs", "", ".hidden", "a" * 129, "\x00"]),
                  st.text(max_size=12))
base_models = st.one_of(
    st.sampled_from(["tiny", "tiny", "tiny", "tiny", "tiny", "tiny:3", "", " ", "/etc", "/", "..", "../x", "RUNS", "RUNS/alice/sessions",
                     "RUNS/bob", "org/no-such-model", "no-such-model", "tiny\x00", "~", "/tmp"]),
    st.text(max_size=16),
)
options = st.one_of(st.just(""), st.sampled_from([
    "{}", "[]", "{", '{"precision": "fp7"}', '{"device": "cuda:99"}', '{"device": "banana"}', '{"revision": "main"}',
    '{"precision": "bf16"}', '{"device": "cpu"}', '{"device": 3}', '{"precision": null}',
]), st.text(max_size=12))
_calls = (
    st.tuples(st.just("create"), callers, base_models, st.sampled_from([-1, 0, 1, 2, 4, 1025, 100_000, 2**31 - 1]), floats,
              st.sampled_from([0.0, 0.1, -0.5, 1.0, math.nan]),
              st.sampled_from([[], ["q_proj"], ["nope"], [""]]), st.integers(-(2**63), 2**63 - 1), options,
              st.sampled_from(["", "c1", "c2"])),
    st.tuples(st.just("forward_backward"), callers, session_refs, st.lists(datums(), max_size=2),
              st.sampled_from(["cross_entropy"] * 4 + ["importance_sampling", "ppo", "cispo", "", "nope"]),
              st.dictionaries(st.sampled_from(["clip_low_threshold", "clip_high_threshold", "eps_low", "dual_clip", "x"]),
                              floats, max_size=2), st.sampled_from(["", "r1", "r2"])),
    st.tuples(st.just("forward"), callers, session_refs, st.lists(datums(), max_size=3),
              st.sampled_from(["", "cross_entropy", "nope"])),
    st.tuples(st.just("optim_step"), callers, session_refs, st.one_of(st.just(1e-3), floats), st.one_of(st.just(0.0), floats),
              st.one_of(st.just(0.0), floats), st.one_of(st.just(0.0), floats), st.sampled_from(["", "r1", "r3"])),
    st.tuples(st.just("sample"), callers, session_refs, st.lists(token_lists, max_size=3),
              st.sampled_from([1, 4, 4, 4, -1, 0, 8193, 2**31 - 1]), st.sampled_from([-1, 0, 1, 1, 3, 2000]),
              st.one_of(st.none(), st.none(), floats), st.one_of(st.none(), st.none(), floats), st.sampled_from([-1, 0, 1, 5, 2**31 - 1]),
              st.lists(st.text(max_size=3), max_size=2), st.lists(token_ids, max_size=2), st.one_of(st.just(""), path_refs)),
    # and a Sample / SaveWeightsForSampler that get past the field checks, to reach the model
    st.tuples(st.just("sample"), callers, _pooled, st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8),
              min_size=1, max_size=2), st.integers(1, 6), st.integers(1, 3), st.one_of(st.none(), st.floats(0, 2)),
              st.one_of(st.none(), st.floats(0.05, 1)), st.integers(0, 50), st.lists(st.text(max_size=3), max_size=2),
              st.lists(st.integers(0, VOCAB - 1), max_size=2), st.one_of(st.just(""), st.integers(0, 10))),
    st.tuples(st.just("save_sampler"), callers, _pooled, st.sampled_from(["w1", "w2"])),
    st.tuples(st.just("logprobs"), callers, session_refs, st.lists(token_lists, max_size=3)),
    st.tuples(st.just("save_state"), callers, session_refs, names),
    st.tuples(st.just("save_sampler"), callers, session_refs, names),
    st.tuples(st.just("load_state"), callers, session_refs, path_refs, st.booleans()),
    st.tuples(st.just("get_weights"), callers, session_refs, path_refs, st.booleans()),
    st.tuples(st.just("info"), callers, session_refs),
)
ops = st.one_of(*_calls, *_calls, st.tuples(st.just("close"), callers, session_refs))  # closing less often than the rest


@dataclass
class Server:
    runs: str
    keys: dict[str, str]
    stub: Any
    healthy: str  # alice's session that must keep working
    sessions: dict[str, list[str]]  # the sessions the fuzzer made and did not close, by tenant
    saved: dict[str, list[str]] = field(default_factory=lambda: {"alice": [], "bob": []})


@pytest.fixture(scope="module")
def server(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    import torch

    from tinker_scheduler import Scheduler
    from tinker_scheduler.testing import SLEEP_TRAIN

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the in-process model hosts: 10x faster than a thread per core on a busy 2-core machine
    root = tmp_path_factory.mktemp("training-fuzz")
    scheduler = Scheduler(port=0, db=root / "scheduler.db", runs_dir=root / "runs", runner=SLEEP_TRAIN, paused=True,
                          tick_s=0.05, shutdown_timeout=10.0, training_host_backend="local").start()
    keys = {"alice": scheduler.store.add_tenant("alice"), "bob": scheduler.store.add_tenant("bob")}
    channel = grpc.insecure_channel(scheduler.address)
    stub = training_pb2_grpc.TrainingServiceStub(channel)
    try:
        def create(tenant: str, seed: int) -> str:
            request = training_pb2.CreateTrainingSessionRequest(base_model="tiny", lora_rank=4, seed=seed)
            return str(stub.CreateSession(request, metadata=_md(keys, tenant), timeout=WAIT_S).session_id)

        healthy = create("alice", 1)
        # sessions to fuzz from the start (most random CreateSession calls fail)
        yield Server(str(scheduler.runs_dir), keys, stub, healthy, {"alice": [create("alice", 2)], "bob": [create("bob", 3)]})
    finally:
        channel.close()
        scheduler.stop()
        torch.set_num_threads(threads)
        print(f"\ntraining service fuzz: {sum(TALLY.values())} calls: {dict(sorted(TALLY.items()))}")
        print(dict(sorted(BY_METHOD.items())))


def _md(keys: dict[str, str], caller: str) -> tuple[tuple[str, str], ...]:
    if caller in keys:
        return (("authorization", f"Bearer {keys[caller]}"),)
    return (("authorization", "Bearer otk_forged0000000000"),) if caller == "forged" else ()


def _call(server: Server, method: str, request: Any, caller: str) -> Any:
    """The answer (a dict of arrays for GetWeights), or None after a clear error."""
    tenant = caller if caller in server.keys else None
    try:
        answer = getattr(server.stub, method)(request, metadata=_md(server.keys, caller), timeout=WAIT_S)
        if method == "GetWeights":
            answer = tensors.join_tensor_chunks(answer)
    except grpc.RpcError as e:
        TALLY[e.code().name] += 1
        BY_METHOD[f"{method} {e.code().name}"] += 1
        assert e.code() in CLEAR, f"{method}: {e.code()} {e.details()}"
        assert e.details() and "Traceback" not in e.details(), f"{method}: {e.code()} {e.details()!r}"
        if tenant is None:
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED, f"{method} by {caller}: {e.code()} {e.details()}"
        return None
    TALLY["OK"] += 1
    BY_METHOD[f"{method} OK"] += 1
    assert tenant is not None, f"{method} answered a caller without a valid key"
    sid = getattr(request, "session_id", "")
    if sid and method != "CloseSession":  # (closing an unknown or foreign session is a no-op answer)
        assert sid in server.sessions[tenant] or sid == server.healthy and tenant == "alice", (
            f"{method}: {tenant} used session {sid} that is not theirs")
    return answer


def _run(server: Server, sequence: list[tuple[Any, ...]]) -> None:
    def sid(ref: Any) -> str:
        if isinstance(ref, str):
            return ref
        made = server.sessions.get(caller, []) if ref[0] == "own" else server.sessions["alice"] + server.sessions["bob"]
        return made[ref[1] % len(made)] if made else "ts-none"

    def path(ref: Any) -> str:
        saved = server.saved["alice"] + server.saved["bob"]
        if isinstance(ref, int):
            return saved[ref % len(saved)] if saved else ""
        return ref.replace("RUNS", server.runs)

    def foreign(tenant: str | None, p: str) -> bool:
        return any(p in server.saved[t] for t in server.saved if t != tenant)

    for op, caller, *args in sequence:
        tenant = caller if caller in server.keys else None
        if op == "create":
            base, rank, alpha, dropout, targets, seed, opts, rid = args
            request = training_pb2.CreateTrainingSessionRequest(
                base_model=base.replace("RUNS", server.runs), lora_rank=rank, lora_alpha=alpha, lora_dropout=dropout,
                lora_target_modules=targets, seed=seed, options_json=opts, request_id=rid)
            other_dirs = [s for t, ss in server.saved.items() if t != tenant for s in ss]
            if other_dirs and "RUNS" in base:  # another tenant's saved state as a base model
                request.base_model = other_dirs[0]
            session = _call(server, "CreateSession", request, caller)
            if session is not None:
                assert tenant is not None and not foreign(tenant, request.base_model)
                assert session.info.base_model == request.base_model.strip() or session.info.base_model
                if session.session_id not in server.sessions[tenant]:
                    server.sessions[tenant].append(session.session_id)
        elif op in ("forward_backward", "forward"):
            ref, data, loss_fn, *rest = args
            if op == "forward_backward":
                request = training_pb2.ForwardBackwardRequest(session_id=sid(ref), data=data, loss_fn=loss_fn,
                                                              loss_config=rest[0], request_id=rest[1])
                _call(server, "ForwardBackward", request, caller)
            else:
                _call(server, "Forward", training_pb2.ForwardRequest(session_id=sid(ref), data=data, loss_fn=loss_fn), caller)
        elif op == "optim_step":
            ref, lr, b1, wd, clip, rid = args
            adam = training_pb2.AdamParams(learning_rate=lr, beta1=b1, weight_decay=wd, grad_clip_norm=clip)
            _call(server, "OptimStep", training_pb2.OptimStepRequest(session_id=sid(ref), adam=adam, request_id=rid), caller)
        elif op == "sample":
            ref, prompts, max_tokens, n, temperature, top_p, top_k, stop, stop_ids, sampler = args
            sp = training_pb2.SamplingParams(max_tokens=max_tokens, top_k=top_k, stop=stop, stop_token_ids=stop_ids, seed=1)
            if temperature is not None:
                sp.temperature = temperature
            if top_p is not None:
                sp.top_p = top_p
            p = path(sampler)
            request = training_pb2.SampleRequest(session_id=sid(ref), prompts=[common_pb2.TokenList(tokens=t) for t in prompts],
                                                 sampling_params=sp, num_samples=n, sampler_path=p)
            if _call(server, "Sample", request, caller) is not None:
                assert not p or not foreign(tenant, p), f"{tenant} sampled from another tenant's weights {p}"
        elif op == "logprobs":
            request = training_pb2.ComputeLogprobsRequest(
                session_id=sid(args[0]), sequences=[common_pb2.TokenList(tokens=t) for t in args[1]])
            _call(server, "ComputeLogprobs", request, caller)
        elif op in ("save_state", "save_sampler"):
            method, cls = (("SaveState", training_pb2.SaveStateRequest) if op == "save_state"
                           else ("SaveWeightsForSampler", training_pb2.SaveWeightsForSamplerRequest))
            answer = _call(server, method, cls(session_id=sid(args[0]), name=args[1]), caller)
            if answer is not None:
                assert tenant is not None and answer.path.startswith(f"{server.runs}/{tenant}/sessions/"), answer.path
                server.saved[tenant].append(answer.path)
        elif op == "load_state":
            p = path(args[1])
            request = training_pb2.LoadStateRequest(session_id=sid(args[0]), path=p, with_optimizer=args[2])
            if _call(server, "LoadState", request, caller) is not None:
                assert not foreign(tenant, p), f"{tenant} loaded another tenant's state {p}"
        elif op == "get_weights":
            p = path(args[1])
            request = training_pb2.GetWeightsRequest(session_id=sid(args[0]), path=p, trainable_only=args[2])
            if _call(server, "GetWeights", request, caller) is not None:
                assert not foreign(tenant, p), f"{tenant} read another tenant's weights {p}"
        elif op == "info":
            _call(server, "GetInfo", training_pb2.GetInfoRequest(session_id=sid(args[0])), caller)
        else:
            s = sid(args[0])
            if s == server.healthy:
                continue
            _call(server, "CloseSession", training_pb2.CloseTrainingSessionRequest(session_id=s), caller)
            if tenant is not None and s in server.sessions[tenant]:
                server.sessions[tenant].remove(s)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(ops, min_size=1, max_size=8))
def test_random_training_service_sequences_get_an_answer_or_a_clear_status(server: Server, sequence: list[tuple[Any, ...]]) -> None:
    TALLY["sequences"] += 1
    for tenant, seed in (("alice", 2), ("bob", 3)):  # keep a session per tenant to fuzz (sequences close some)
        if not server.sessions[tenant]:
            request = training_pb2.CreateTrainingSessionRequest(base_model="tiny", lora_rank=4, seed=seed)
            server.sessions[tenant].append(
                server.stub.CreateSession(request, metadata=_md(server.keys, tenant), timeout=WAIT_S).session_id)
    _run(server, sequence)
    # and a healthy session still trains
    md = _md(server.keys, "alice")
    datum = training_pb2.Datum(tokens=SEQ[:-1], target_tokens=SEQ[1:], loss_weights=[1.0] * (len(SEQ) - 1))
    fb = server.stub.ForwardBackward(training_pb2.ForwardBackwardRequest(
        session_id=server.healthy, data=[datum], loss_fn="cross_entropy"), metadata=md, timeout=WAIT_S)
    assert math.isfinite(fb.metrics["loss"])
    server.stub.OptimStep(training_pb2.OptimStepRequest(session_id=server.healthy, adam=training_pb2.AdamParams(
        learning_rate=1e-3)), metadata=md, timeout=WAIT_S)


def _refused(server: Server, method: str, request: Any, caller: str = "alice") -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        getattr(server.stub, method)(request, metadata=_md(server.keys, caller), timeout=WAIT_S)
    return info.value.code(), info.value.details()


def test_a_base_model_in_an_unknown_users_home_is_refused_like_any_other_path(server: Server) -> None:
    """Found by the fuzzer: ``~0`` failed CreateSession with UNKNOWN ("Could not determine home directory")."""
    for name in ("~0", "~no-such-user/model"):
        code, details = _refused(server, "CreateSession", training_pb2.CreateTrainingSessionRequest(base_model=name, lora_rank=4))
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert details.startswith(f"base_model: {name!r} is not a base model this scheduler allows")


def test_a_lora_rank_over_the_limit_is_refused_before_a_host_allocates_it(server: Server) -> None:
    """Found by the fuzzer: rank 2**31 - 1 was INTERNAL (the host tried to allocate 1 TB) and rank
    100,000 was accepted, giving the tiny model 1.1 billion trainable parameters on a shared host."""
    from tinker_scheduler.training_wire import MAX_LORA_RANK

    for rank in (MAX_LORA_RANK + 1, 100_000, 2**31 - 1):
        code, details = _refused(server, "CreateSession", training_pb2.CreateTrainingSessionRequest(base_model="tiny", lora_rank=rank))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details == f"lora_rank: {rank} is over the limit of {MAX_LORA_RANK} (0 = full fine-tuning)"


def test_sample_with_a_prompt_token_outside_the_vocabulary_names_the_prompt(server: Server) -> None:
    """Found by the fuzzer: such a prompt was INTERNAL ("IndexError: index out of range in self")."""
    sid = server.sessions["alice"][0] if server.sessions["alice"] else server.healthy
    for tokens, bad in (([1, VOCAB], VOCAB), ([-1, 2], -1), ([2**31 - 1], 2**31 - 1)):
        request = training_pb2.SampleRequest(session_id=sid, prompts=[common_pb2.TokenList(tokens=[1, 2]), common_pb2.TokenList(tokens=tokens)],
                                             sampling_params=training_pb2.SamplingParams(max_tokens=2))
        code, details = _refused(server, "Sample", request)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details == f"prompts[1]: token id {bad} is outside the model's vocabulary [0, {VOCAB})"


@pytest.mark.parametrize(("base_model", "options", "named"), [
    ("org/no-such-model", "", "'org/no-such-model'"),
    ("tiny:7", '{"device": "cuda:99"}', "cuda:99"),
    ("tiny:8", '{"precision": "fp7"}', "fp7"),
])
def test_a_base_model_a_host_cannot_load_is_a_clear_error(server: Server, base_model: str, options: str, named: str) -> None:
    """Found by the fuzzer: with hosts in the scheduler's process, a hub id that is not cached (no
    network) failed CreateSession with UNKNOWN ("Exception calling application: ...")."""
    request = training_pb2.CreateTrainingSessionRequest(base_model=base_model, lora_rank=4, options_json=options)
    code, details = _refused(server, "CreateSession", request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and named in details and "\n" not in details, details
