"""Fuzzing the JobService over a real gRPC channel (issue 12's reliability suite).

Random sequences of Submit / Get / List / Cancel / Pause / Resume / SetSettings / Fork / Watch from two tenants and from callers with
bad or missing API keys -- odd config texts (bad YAML, binary-ish text, huge fields, path-like
names, YAML alias bombs), forged and foreign page tokens, unknown and other-tenant job ids,
request ids reused with other arguments -- each get an answer or a clear status with a message,
never UNKNOWN or INTERNAL; no answer ever shows a tenant another tenant's job or config; and the
scheduler still serves a normal Submit and List after each sequence.

The scheduler is real (its gRPC server and SQLite job store) but *paused*: it stores jobs and
starts none, so nothing trains. Bounded: a fixed number of examples, localhost only.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinker_core.config import MAX_CONFIG_BYTES
from tinker_core.proto import jobs_pb2, jobs_pb2_grpc
from tinker_scheduler.testing import job_config_text

CLEAR = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
}
WAIT_S = 30.0
#: A Watch of one's own live job streams until the job ends (never, on a paused scheduler): read
#: what is stored, then let this client deadline end the stream.
WATCH_LIVE_S = 0.2
#: Every call's outcome (status code name) over the module, for the reliability report.
TALLY: Counter[str] = Counter()
BY_METHOD: Counter[str] = Counter()


def alias_bomb(levels: int) -> str:
    """A small YAML text whose aliases expand to 9**(levels + 1) strings in a free-form section."""
    lines = ["    a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "algorithm: {name: sft, steps: 2}\noptimizer:\n  params:\n" + "\n".join(lines) + "\n"


#: Config texts nested past what the parsers, the config model or its JSON dump can take.
DEEP_TEXTS = (
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 50_000 + "1" + "}" * 50_000,
    "a: " + "[" * 20_000 + "]" * 20_000,
    '{"algorithm": {"name": "sft", "steps": 2}, "optimizer": {"params": {"x": ' + "[" * 300 + "]" * 300 + "}}}",
)
#: Page tokens shaped like the server's but not made by it.
DEEP_TOKENS = (
    base64.urlsafe_b64encode(b"[" * 100_000).decode(),
    *(base64.urlsafe_b64encode(json.dumps({"tenant": "alice", "states": [], "before": b}).encode()).decode()
      for b in (2**63, 10**20, -(2**70), 0, -1)),
)

odd_names = st.one_of(
    st.sampled_from(["..", "../x", "/tmp/x", "a/b", "x\x00y", "n" * 256, "", " ", "-", "é", "runs", "local"]),
    st.text(max_size=40),
)
odd_paths = st.sampled_from(["/etc", "/etc/passwd", "..", "../../alice", "~", "~0", "~no-such-user/x", "/", "runs/alice",
                             "RUNS/alice/x", "tiny:99"])


@st.composite
def config_texts(draw: Any) -> str:
    kind = draw(st.sampled_from(["valid", "valid", "valid", "named", "model", "data", "yaml", "text", "huge", "json", "bomb"]))
    if kind == "valid":
        return job_config_text(name=draw(st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)),
                               steps=draw(st.integers(1, 5)))
    if kind == "named":
        return f"name: {json.dumps(draw(odd_names))}\nalgorithm: {{name: sft, steps: 2}}\n"
    if kind == "model":
        # RUNS stands for the scheduler's runs directory (filled in by the test)
        return f"model: {{name: {json.dumps(draw(odd_paths))}}}\nalgorithm: {{name: sft, steps: 2}}\n"
    if kind == "data":
        return f"algorithm: {{name: sft, steps: 2, data: {json.dumps(draw(odd_paths))}}}\n"
    if kind == "yaml":
        return draw(st.sampled_from([
            "algorithm: [unclosed", "{", "- a\n- b\n", "!!python/object:os.system ls", "a: *missing",
            "algorithm: {name: sft, steps: 1e30}", "algorithm: {name: sft, steps: -1}", "seed: 1e400",
            "algorithm: {name: sft, steps: 2}\nseed: 123456789012345678901234567890\n", "\t", "---\n---\n",
            "algorithm: {name: sft, steps: 2}\nresources: {cpus: 1e9}\n", "priority: 1000\nalgorithm: {name: sft}\n",
            "algorithm: {name: sft, steps: 2}\nseed: " + "9" * 5000 + "\n", '{"seed": ' + "9" * 5000 + "}",
            *DEEP_TEXTS,
        ]))
    if kind == "text":
        return draw(st.text(max_size=200))
    if kind == "huge":
        size = draw(st.sampled_from([MAX_CONFIG_BYTES - 64, MAX_CONFIG_BYTES + 1, 3 * MAX_CONFIG_BYTES]))
        head = "algorithm: {name: sft, steps: 2}\nname: "
        return head + "n" * max(1, size - len(head))
    if kind == "json":
        return json.dumps(draw(st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
            lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
            max_leaves=10,
        )))
    return alias_bomb(draw(st.integers(4, 7)))  # 7: 200 MB if the check ever went away, not an OOM


callers = st.sampled_from(["alice", "alice", "alice", "bob", "bob", "x-api-key", "nobody", "forged", "prefix", "basic"])
job_refs = st.one_of(st.integers(min_value=0, max_value=20), st.text(max_size=30))  # an int: a job made so far
request_ids = st.one_of(st.just(""), st.sampled_from(["r1", "r2", "x" * 256, "x" * 257, "x" * 200_000]), st.text(max_size=20))
priorities = st.one_of(st.none(), st.integers(-101, 101), st.sampled_from([-(2**31), 2**31 - 1]))
page_tokens = st.one_of(
    st.just(""), st.just("own"), st.text(max_size=40), st.sampled_from(["foreign", "own", *DEEP_TOKENS]),
    st.builds(lambda t, b: base64.urlsafe_b64encode(json.dumps({"tenant": t, "states": [], "before": b}).encode()).decode(),
              st.sampled_from(["alice", "bob", "local", ""]), st.one_of(st.integers(-5, 10**20), st.text(max_size=3))),
)
ops = st.one_of(
    st.tuples(st.just("submit"), callers, config_texts(), st.integers(0, 3), request_ids, priorities),
    st.tuples(st.just("get"), callers, job_refs),
    st.tuples(st.just("list"), callers, st.one_of(st.lists(st.integers(1, 5), max_size=2), st.lists(st.integers(-1, 7), max_size=3)),
              st.one_of(st.integers(0, 3), st.integers(-3, 2**31 - 1)), page_tokens),
    st.tuples(st.just("cancel"), callers, job_refs, st.one_of(st.text(max_size=50), st.sampled_from(["r" * 4097, "r" * 3_000_000]))),
    st.tuples(st.just("watch"), callers, job_refs, st.integers(0, 2**64 - 1)),
    st.tuples(st.just("pause"), callers, job_refs, st.one_of(st.text(max_size=50), st.just("r" * 4097))),
    st.tuples(st.just("resume"), callers, job_refs),
    st.tuples(st.just("settings"), callers, job_refs, st.lists(st.one_of(st.text(max_size=30), st.sampled_from([
        "optimizer.lr=0.01", "stages.0.optimizer.lr=0.1", "model.name=gpt2", "optimizer.lr=-1", "optimizer.lr=[1, 2]",
        "rollout.temperature=hot", "algorithm.kl.coef=0.1", "algorithm.eval_every=0", "optimizer.lr", "=1", "x" * 5000,
    ])), max_size=70)),
    st.tuples(st.just("fork"), callers, job_refs, st.one_of(st.none(), st.integers(-2, 2**63 - 1)),
              st.lists(st.one_of(st.text(max_size=20), st.sampled_from(["optimizer.lr=0.1", "model.name=x", "x" * 5000])),
                       max_size=3), request_ids),
)


@dataclass
class Server:
    address: str
    runs: str
    keys: dict[str, str]
    stub: Any
    #: Every job id the fuzzer saw created, by tenant, and the config text each was sent with.
    jobs: dict[str, dict[str, str]] = field(default_factory=lambda: {"alice": {}, "bob": {}})
    tokens: dict[str, str] = field(default_factory=dict)  # a page token each tenant was given


@pytest.fixture(scope="module")
def server(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from tinker_scheduler import Scheduler
    from tinker_scheduler.testing import SLEEP_TRAIN

    root = tmp_path_factory.mktemp("job-fuzz")
    scheduler = Scheduler(port=0, db=root / "scheduler.db", runs_dir=root / "runs", runner=SLEEP_TRAIN,
                          paused=True, tick_s=0.05, shutdown_timeout=10.0).start()
    keys = {"alice": scheduler.store.add_tenant("alice"), "bob": scheduler.store.add_tenant("bob")}
    channel = grpc.insecure_channel(scheduler.address)
    try:
        yield Server(scheduler.address, str(scheduler.runs_dir), keys, jobs_pb2_grpc.JobServiceStub(channel))
    finally:
        channel.close()
        scheduler.stop()
        print(f"\njob service fuzz: {sum(TALLY.values())} calls: {dict(sorted(TALLY.items()))}")
        print(dict(sorted(BY_METHOD.items())))


def _metadata(server: Server, caller: str) -> tuple[tuple[str, str], ...]:
    alice = server.keys["alice"]
    return {
        "alice": (("authorization", f"Bearer {alice}"),),
        "bob": (("authorization", f"Bearer {server.keys['bob']}"),),
        "nobody": (),
        "forged": (("authorization", "Bearer otk_forged0000000000"),),
        "prefix": (("authorization", f"Bearer {alice[:-1]}"),),
        "basic": (("authorization", f"Basic {alice}"),),
        "x-api-key": (("x-api-key", f" {server.keys['bob']} "),),
    }[caller]


def _tenant(caller: str) -> str | None:
    """The tenant a caller acts as (None: it must be refused UNAUTHENTICATED)."""
    return {"alice": "alice", "bob": "bob", "x-api-key": "bob"}.get(caller)


def _call(server: Server, method: str, request: Any, caller: str, *, stream_timeout: float | None = None) -> Any:
    """The answer (a list of events for Watch), or None after a clear error; checks isolation."""
    tenant = _tenant(caller)
    others = {jid for t, jobs in server.jobs.items() if t != tenant for jid in jobs}
    try:
        fn = getattr(server.stub, method)
        answer = fn(request, metadata=_metadata(server, caller), timeout=stream_timeout or WAIT_S)
        if method == "Watch":
            events: list[Any] = []
            try:
                for event in answer:
                    events.append(event)
            except grpc.RpcError as e:
                if not (stream_timeout and e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and e.details()):
                    raise
            answer = events
    except grpc.RpcError as e:
        TALLY[e.code().name] += 1
        BY_METHOD[f"{method} {e.code().name}"] += 1
        assert e.code() in CLEAR, f"{method}: {e.code()} {e.details()}"
        assert e.details() and "Traceback" not in e.details(), f"{method}: {e.code()} {e.details()!r}"
        if tenant is None:
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED, f"{method} by {caller}: {e.code()} {e.details()}"
        hinted = [jid for jid in others if f"did you mean {jid!r}" in e.details()]
        assert not hinted, f"{method} hinted at another tenant's job: {e.details()}"
        return None
    TALLY["OK"] += 1
    BY_METHOD[f"{method} OK"] += 1
    assert tenant is not None, f"{method} answered a caller without a valid key"
    jobs = answer.jobs if method == "List" else [] if method == "Watch" else [answer.job] if method == "SetSettings" else [answer]
    for job in jobs:
        assert job.tenant == tenant and job.id not in others, f"{method}: {tenant} got {job.tenant}'s job {job.id}"
        assert job.id in server.jobs[tenant] or method == "Submit", f"{method}: {tenant} got an unknown job {job.id}"
    for event in answer if method == "Watch" else []:
        assert event.job_id not in others
    return answer


def _run(server: Server, sequence: list[tuple[Any, ...]]) -> None:
    made = [jid for jobs in server.jobs.values() for jid in jobs]

    def job_id(ref: Any) -> str:
        return made[ref % len(made)] if isinstance(ref, int) and made else str(ref)

    for op, caller, *args in sequence:
        tenant = _tenant(caller)
        if op == "submit":
            text, fmt, rid, priority = args
            text = text.replace("RUNS", server.runs)
            request = jobs_pb2.SubmitJobRequest(config_text=text, config_format=min(fmt, 2), client_request_id=rid)
            if priority is not None:
                request.priority = priority
            sent_before = {t: dict(jobs) for t, jobs in server.jobs.items()}
            job = _call(server, "Submit", request, caller)
            if job is not None and tenant is not None:
                assert job.config_text == text and job.client_request_id == rid
                if job.id in sent_before[tenant]:  # an earlier job returned: only for the same request id and text
                    assert rid and sent_before[tenant][job.id] == text, f"Submit returned an earlier job for {rid!r}"
                else:
                    server.jobs[tenant][job.id] = text
                    made.append(job.id)
        elif op == "get":
            job = _call(server, "Get", jobs_pb2.GetJobRequest(job_id=job_id(args[0])), caller)
            if job is not None:
                assert job.config_text == server.jobs[job.tenant][job.id]
        elif op == "list":
            states, size, token = args
            token = server.tokens.get({"own": tenant, "foreign": "bob" if tenant == "alice" else "alice"}.get(token, ""), token)
            request = jobs_pb2.ListJobsRequest(states=[s % 8 for s in states], page_size=size, page_token=token)
            page = _call(server, "List", request, caller)
            if page is not None:
                assert all(not j.config_text for j in page.jobs)  # summaries only
                if page.next_page_token and tenant is not None:
                    server.tokens[tenant] = page.next_page_token
        elif op == "cancel":
            _call(server, "Cancel", jobs_pb2.CancelJobRequest(job_id=job_id(args[0]), reason=args[1]), caller)
        elif op == "pause":
            _call(server, "Pause", jobs_pb2.PauseJobRequest(job_id=job_id(args[0]), reason=args[1]), caller)
        elif op == "resume":
            _call(server, "Resume", jobs_pb2.ResumeJobRequest(job_id=job_id(args[0])), caller)
        elif op == "fork":
            request = jobs_pb2.ForkJobRequest(job_id=job_id(args[0]), overrides=args[2], client_request_id=args[3])
            if args[1] is not None:
                request.step = args[1]
            _call(server, "Fork", request, caller)
        elif op == "settings":
            _call(server, "SetSettings", jobs_pb2.SetJobSettingsRequest(job_id=job_id(args[0]), settings=args[1]), caller)
        else:
            jid = job_id(args[0])
            own = tenant is not None and jid in server.jobs[tenant]
            request = jobs_pb2.WatchJobRequest(job_id=jid, after_cursor=args[1])
            _call(server, "Watch", request, caller, stream_timeout=WATCH_LIVE_S if own else None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(ops, min_size=1, max_size=10))
def test_random_job_service_sequences_get_an_answer_or_a_clear_status(server: Server, sequence: list[tuple[Any, ...]]) -> None:
    TALLY["sequences"] += 1
    _run(server, sequence)
    # and the scheduler still takes and lists a normal job
    md = _metadata(server, "alice")
    job = server.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=job_config_text()), metadata=md, timeout=WAIT_S)
    server.jobs["alice"][job.id] = job.config_text
    assert server.stub.List(jobs_pb2.ListJobsRequest(page_size=1), metadata=md, timeout=WAIT_S).jobs[0].id == job.id


def test_a_yaml_alias_bomb_is_refused_before_it_expands(server: Server) -> None:
    """Found by the fuzzer: ~450 bytes of aliases stood for 9**7 strings in ``optimizer.params``;
    the job was stored with a 23 MB ``config_json`` (a 500-byte one took 7 s and 206 MB; one more
    level, 1.9 GB)."""
    md = _metadata(server, "alice")
    with pytest.raises(grpc.RpcError) as info:
        server.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=alias_bomb(6)), metadata=md, timeout=WAIT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("config_text: its YAML aliases expand to over")
    # aliases that expand to no more values than the text has bytes are fine
    text = "algorithm: {name: sft, steps: 2}\noptimizer: {params: {w: &a [1, 2], x: *a, y: *a}}\n"
    assert server.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=text), metadata=md, timeout=WAIT_S).config_text == text


def test_an_integer_over_pythons_digit_limit_is_a_config_text_error(server: Server) -> None:
    md = _metadata(server, "alice")
    for text in ("algorithm: {name: sft, steps: 2}\nseed: " + "9" * 5000 + "\n", '{"seed": ' + "9" * 5000 + "}"):
        with pytest.raises(grpc.RpcError) as info:
            server.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=text), metadata=md, timeout=WAIT_S)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details().startswith("config_text: ") and "4300 digits" in info.value.details()


def test_watch_from_a_cursor_past_the_stores_integers_ends_like_any_cursor_past_the_end(server: Server) -> None:
    """Found by the fuzzer: ``after_cursor`` >= 2**63 (a uint64 on the wire) failed the stream with
    UNKNOWN (SQLite's OverflowError) instead of meaning "no event after this one"."""
    md = _metadata(server, "alice")
    job = server.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=job_config_text()), metadata=md, timeout=WAIT_S)
    server.jobs["alice"][job.id] = job.config_text
    server.stub.Cancel(jobs_pb2.CancelJobRequest(job_id=job.id), metadata=md, timeout=WAIT_S)
    for cursor in (2**63 - 1, 2**63, 2**64 - 1):
        request = jobs_pb2.WatchJobRequest(job_id=job.id, after_cursor=cursor)
        assert list(server.stub.Watch(request, metadata=md, timeout=WAIT_S)) == []
    assert len(list(server.stub.Watch(jobs_pb2.WatchJobRequest(job_id=job.id), metadata=md, timeout=WAIT_S))) == 2


@pytest.mark.parametrize("text", DEEP_TEXTS, ids=["json-lists", "json-objects", "yaml-lists", "params-300-deep"])
def test_a_config_nested_too_deeply_is_a_config_text_error(server: Server, text: str) -> None:
    """Found by the fuzzer: deep nesting failed Submit with UNKNOWN (a RecursionError in the JSON or
    YAML parser, or pydantic's "Maximum serialization depth exceeded" when the job was stored)."""
    with pytest.raises(grpc.RpcError) as info:
        server.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=text), metadata=_metadata(server, "alice"), timeout=WAIT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("config_text: nested"), info.value.details()


@pytest.mark.parametrize("token", DEEP_TOKENS)
def test_a_forged_page_token_nested_deeply_or_past_the_stores_integers_is_refused(server: Server, token: str) -> None:
    """Found by the fuzzer: such tokens failed List with UNKNOWN (RecursionError, SQLite's OverflowError)."""
    with pytest.raises(grpc.RpcError) as info:
        server.stub.List(jobs_pb2.ListJobsRequest(page_token=token), metadata=_metadata(server, "alice"), timeout=WAIT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("page_token: not a token this server gave you")


@pytest.mark.parametrize("name", ["~0", "~no-such-user/model"])
def test_a_model_path_of_an_unknown_users_home_is_refused_like_any_other_path(server: Server, name: str) -> None:
    """Found by the TrainingService fuzzer: ``~0`` failed with UNKNOWN ("Could not determine home directory")."""
    text = f"model: {{name: {json.dumps(name)}}}\nalgorithm: {{name: sft, steps: 2}}\n"
    with pytest.raises(grpc.RpcError) as info:
        server.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=text), metadata=_metadata(server, "alice"), timeout=WAIT_S)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert info.value.details().startswith(f"model.name: {name!r} is not a base model this scheduler allows")


def test_long_request_ids_and_cancel_reasons_are_refused_so_list_pages_stay_small(server: Server) -> None:
    """Found while fuzzing: a 200,000-character client_request_id and a 3 MB Cancel reason were stored
    and sent back in every List page (a reason near 4 MiB would break List for that tenant's clients)."""
    from tinker_scheduler.job_service import MAX_REASON_CHARS, MAX_REQUEST_ID_CHARS

    md = _metadata(server, "alice")
    submit = server.stub.Submit
    with pytest.raises(grpc.RpcError) as info:
        submit(jobs_pb2.SubmitJobRequest(config_text=job_config_text(), client_request_id="x" * (MAX_REQUEST_ID_CHARS + 1)),
               metadata=md, timeout=WAIT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(f"client_request_id: {MAX_REQUEST_ID_CHARS + 1} characters, over the limit")
    job = submit(jobs_pb2.SubmitJobRequest(config_text=job_config_text(), client_request_id="x" * MAX_REQUEST_ID_CHARS),
                 metadata=md, timeout=WAIT_S)
    server.jobs["alice"][job.id] = job.config_text
    with pytest.raises(grpc.RpcError) as info:
        server.stub.Cancel(jobs_pb2.CancelJobRequest(job_id=job.id, reason="r" * (MAX_REASON_CHARS + 1)), metadata=md, timeout=WAIT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and info.value.details().startswith("reason: 4,097 characters")
    assert server.stub.Get(jobs_pb2.GetJobRequest(job_id=job.id), metadata=md, timeout=WAIT_S).state == jobs_pb2.JOB_STATE_QUEUED
    cancelled = server.stub.Cancel(jobs_pb2.CancelJobRequest(job_id=job.id, reason="r" * MAX_REASON_CHARS), metadata=md, timeout=WAIT_S)
    assert cancelled.state == jobs_pb2.JOB_STATE_CANCELLED and cancelled.reason == "r" * MAX_REASON_CHARS
