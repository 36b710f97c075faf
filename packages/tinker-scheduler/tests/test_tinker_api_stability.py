"""The gateway's stability records (``stable_reinforce``): what is recorded, who may use it, how
long, and how a datum's provenance turns into the sampler logprobs it trains against."""

from __future__ import annotations

import pytest

from tinker_scheduler.errors import StatusError
from tinker_scheduler.tinker_api.stability import PROMPT, SAMPLED, StabilityRecords

SAMPLES = [{"tokens": [7, 8, 2], "logprobs": [-0.5, -1.5, -0.25]}, {"tokens": [9], "logprobs": [-3.0]}]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def datum() -> dict[str, list[float]]:
    # prompt [1, 5, 6] + sample [7, 8, 2], shifted: targets [5, 6, 7, 8, 2]
    return {"tokens": [1, 5, 6, 7, 8], "target_tokens": [5, 6, 7, 8, 2], "sampling_logprobs": [0.0] * 5,
            "advantages": [0.0, 0.0, 1.0, 1.0, 1.0]}


def spans(sid: str = "req-1-0") -> list[dict]:
    return [{"kind": PROMPT, "sequence_id": sid, "offset": 1, "length": 2},
            {"kind": SAMPLED, "sequence_id": sid, "offset": 0, "length": 3}]


def test_resolve_puts_the_recorded_logprobs_on_sampled_positions_and_drops_prompt_ones():
    records = StabilityRecords()
    records.record("alice", "req-1", [1, 5, 6], SAMPLES)
    d = datum()
    records.resolve("alice", 0, d, spans())
    assert d["sampling_logprobs"] == [0.0, 0.0, -0.5, -1.5, -0.25]
    assert d["loss_weights"] == [0.0, 0.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(("tenant", "bad_spans", "message"), [
    ("bob", spans(), "is not recorded"),  # another tenant's id is unknown to this one
    ("alice", [], "needs provenance"),
    ("alice", spans()[:1], "cover 2 positions but target_tokens has 5"),
    ("alice", [{**spans()[0], "offset": 0}, spans()[1]], "are not prompt"),  # the prompt run one token off
    ("alice", spans("req-1-1"), "are not sampled tokens"),  # sample 1's tokens are not these
])
def test_resolve_refuses_what_the_records_do_not_back(tenant, bad_spans, message):
    records = StabilityRecords()
    records.record("alice", "req-1", [1, 5, 6], SAMPLES)
    with pytest.raises(StatusError, match=message) as e:
        records.resolve(tenant, 3, datum(), bad_spans)
    assert e.value.code == "INVALID_ARGUMENT" and "data[3].loss_fn_input_spans" in str(e.value)


def test_records_expire_a_day_after_their_last_use_and_are_bounded():
    clock = Clock()
    records = StabilityRecords(clock=clock, max_records=3)
    records.record("alice", "req-1", [1], SAMPLES)
    clock.now = 23 * 3600.0
    records.get("alice", "req-1-0", "x")  # a use restarts the day
    clock.now = 46 * 3600.0
    assert records.get("alice", "req-1-0", "x").tokens.tolist() == [7, 8, 2]
    with pytest.raises(StatusError, match="not recorded"):
        records.get("alice", "req-1-1", "x")  # unused since 0 h: expired
    for i in range(3):
        records.record("alice", f"req-{i + 2}", [1], SAMPLES[:1])
    with pytest.raises(StatusError, match="not recorded"):  # the least recently used went first
        records.get("alice", "req-1-0", "x")


def test_records_are_bounded_by_the_values_they_hold():
    records = StabilityRecords(max_values=12)  # one sample of SAMPLES holds 1 + 3 + 3 = 7 values
    records.record("alice", "req-1", [1], SAMPLES[:1])
    records.record("alice", "req-2", [1], SAMPLES[:1])  # 14 > 12: req-1-0 goes
    assert records.get("alice", "req-2-0", "x").logprobs.tolist() == [-0.5, -1.5, -0.25]
    with pytest.raises(StatusError, match="not recorded"):
        records.get("alice", "req-1-0", "x")
