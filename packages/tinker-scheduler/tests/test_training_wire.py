"""TrainingService messages <-> model host values (no server, no model)."""

from __future__ import annotations

import pytest

from tinker_algos.tinker_ops import STOP_REASONS
from tinker_core.proto import training_pb2
from tinker_scheduler import training_wire as wire
from tinker_scheduler.errors import StatusError


def test_every_stop_reason_the_host_returns_has_a_wire_value():
    for name in set(STOP_REASONS.values()):
        assert wire.stop_reason(name) != training_pb2.STOP_REASON_UNSPECIFIED
    rows = [[{"tokens": [5, 2], "logprobs": [-0.1, -0.2], "stop_reason": "stop_token"}]]
    out = wire.sample_response(rows).results[0].samples[0]
    assert list(out.tokens) == [5, 2] and out.stop_reason == training_pb2.STOP_REASON_STOP_TOKEN


def test_a_create_request_becomes_a_session_request_with_its_options():
    request = training_pb2.CreateTrainingSessionRequest(
        base_model="tiny", lora_rank=4, lora_target_modules=["q_proj"], seed=7, request_id="r1",
        options_json='{"precision": "fp32", "device": "cpu"}',
    )
    new = wire.session_request(request)
    assert (new.base_model, new.lora_rank, new.lora_target_modules, new.seed) == ("tiny", 4, ("q_proj",), 7)
    assert (new.precision, new.device, new.request_id) == ("fp32", "cpu", "r1")


@pytest.mark.parametrize(
    ("options_json", "named"),
    [("{", "not valid JSON"), ("[1]", "JSON object"), ('{"dtype": "x"}', "unknown key"),
     ('{"revision": "main"}', "options_json.revision")],
)
def test_bad_options_are_named(options_json, named):
    with pytest.raises(StatusError, match=named) as info:
        wire.session_request(training_pb2.CreateTrainingSessionRequest(base_model="tiny", options_json=options_json))
    assert info.value.code == "INVALID_ARGUMENT"


def test_data_and_sampling_fields_are_checked():
    datum = training_pb2.Datum(tokens=[1, 2], target_tokens=[2, 3], loss_weights=[0, 1])
    assert wire.datum_to_dict(datum)["loss_weights"] == [0, 1]
    datum.extra_inputs["x"].float_data.extend([1.0])
    with pytest.raises(StatusError, match="data.extra_inputs"):
        wire.datum_to_dict(datum)
    assert wire.sampling_fields(training_pb2.SamplingParams(max_tokens=3, temperature=0.5)) == {
        "top_k": 0, "max_tokens": 3, "stop": [], "stop_token_ids": [], "temperature": 0.5,
    }
    with pytest.raises(StatusError, match="max_tokens"):
        wire.sampling_fields(training_pb2.SamplingParams())
    assert wire.adam_fields(training_pb2.AdamParams(learning_rate=0.5))["learning_rate"] == 0.5


def test_a_state_that_cannot_serve_the_request_is_failed_precondition():
    from tinker_core.errors import PreconditionError
    from tinker_scheduler.errors import classify

    assert classify(PreconditionError("weights have diverged")) == ("FAILED_PRECONDITION", "weights have diverged")
    assert classify(ValueError("bad")) == ("INVALID_ARGUMENT", "bad")
