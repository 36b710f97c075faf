"""The wire protocol: committed stubs are fresh, services and methods exist, messages and the
tensor helpers round-trip."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import descriptor_pb2

from tinker_core.proto import common_pb2, env_pb2, jobs_pb2, tensors, training_pb2

REPO_ROOT = Path(__file__).resolve().parents[3]
GEN_SCRIPT = REPO_ROOT / "scripts" / "gen_protos.py"
PROTO_DIR = Path(tensors.__file__).parent

# service -> {method: (request, response, server_streaming)}
SERVICES: dict[str, tuple[str, dict[str, tuple[str, str, bool]]]] = {
    "JobService": ("jobs", {
        "Submit": ("SubmitJobRequest", "Job", False),
        "Get": ("GetJobRequest", "Job", False),
        "List": ("ListJobsRequest", "ListJobsResponse", False),
        "Cancel": ("CancelJobRequest", "Job", False),
        "Watch": ("WatchJobRequest", "JobEvent", True),
        "Pause": ("PauseJobRequest", "Job", False),
        "Resume": ("ResumeJobRequest", "Job", False),
        "SetSettings": ("SetJobSettingsRequest", "SetJobSettingsResponse", False),
        "Fork": ("ForkJobRequest", "Job", False),
    }),
    "TrainingService": ("training", {
        "CreateSession": ("CreateTrainingSessionRequest", "TrainingSession", False),
        "GetInfo": ("GetInfoRequest", "ModelInfo", False),
        "ForwardBackward": ("ForwardBackwardRequest", "ForwardBackwardResponse", False),
        "Forward": ("ForwardRequest", "ForwardResponse", False),
        "OptimStep": ("OptimStepRequest", "OptimStepResponse", False),
        "Sample": ("SampleRequest", "SampleResponse", False),
        "ComputeLogprobs": ("ComputeLogprobsRequest", "ComputeLogprobsResponse", False),
        "SaveState": ("SaveStateRequest", "SaveStateResponse", False),
        "LoadState": ("LoadStateRequest", "LoadStateResponse", False),
        "SaveWeightsForSampler": ("SaveWeightsForSamplerRequest", "SaveWeightsForSamplerResponse", False),
        "GetWeights": ("GetWeightsRequest", "TensorChunk", True),
        "CloseSession": ("CloseTrainingSessionRequest", "CloseTrainingSessionResponse", False),
    }),
    "EnvService": ("env", {
        "CreateSession": ("CreateEnvSessionRequest", "CreateEnvSessionResponse", False),
        "Reset": ("ResetRequest", "ResetResponse", False),
        "Step": ("StepRequest", "StepResponse", False),
        "Observe": ("ObserveRequest", "ObserveResponse", False),
        "Last": ("LastRequest", "LastResponse", False),
        "AgentSelection": ("AgentSelectionRequest", "AgentCycleState", False),
        "CloseSession": ("CloseEnvSessionRequest", "CloseEnvSessionResponse", False),
    }),
}


# ---- the generated stubs --------------------------------------------------------------------


def test_committed_stubs_are_fresh():
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools is not installed (it is in the root dev group): cannot regenerate the stubs to compare")
    if not GEN_SCRIPT.is_file():
        pytest.skip(f"{GEN_SCRIPT} is not here (the package is tested outside the repository)")
    result = subprocess.run(
        [sys.executable, str(GEN_SCRIPT), "--check"], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert result.returncode == 0, (
        "the committed stubs differ from what the .proto files generate; run "
        "`uv run --no-sync python scripts/gen_protos.py`\n" + result.stdout + result.stderr
    )


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_services_have_their_methods_with_the_right_types(service: str):
    module_name, methods = SERVICES[service]
    pb2 = importlib.import_module(f"tinker_core.proto.{module_name}_pb2")
    pb2_grpc = importlib.import_module(f"tinker_core.proto.{module_name}_pb2_grpc")
    desc = pb2.DESCRIPTOR.services_by_name[service]
    assert desc.full_name == f"opentinker.v1.{service}"
    assert set(desc.methods_by_name) == set(methods)
    for name, (request, response, server_streaming) in methods.items():
        method = desc.methods_by_name[name]
        proto = descriptor_pb2.MethodDescriptorProto()
        method.CopyToProto(proto)
        assert method.input_type.name == request, name
        assert method.output_type.name == response, name
        assert proto.server_streaming == server_streaming, name
        assert not proto.client_streaming, name
    # the grpc stubs: a client stub, a servicer base class and the registration function
    stub_cls = getattr(pb2_grpc, f"{service}Stub")
    servicer_cls = getattr(pb2_grpc, f"{service}Servicer")
    assert callable(getattr(pb2_grpc, f"add_{service}Servicer_to_server"))
    assert all(callable(getattr(servicer_cls, m)) for m in methods)
    assert stub_cls.__init__.__code__.co_varnames[:2] == ("self", "channel")


def test_every_proto_is_in_package_opentinker_v1_and_imports_absolutely():
    for module in (common_pb2, env_pb2, jobs_pb2, training_pb2):
        assert module.DESCRIPTOR.package == "opentinker.v1"
        assert module.DESCRIPTOR.name.startswith("tinker_core/proto/")
    for path in sorted(PROTO_DIR.glob("*_pb2*.py")):
        for line in path.read_text().splitlines():
            if line.startswith(("import ", "from ")) and "_pb2" in line:
                assert line.startswith(("from tinker_core.proto import ", "from google.protobuf import ")), (
                    f"{path.name}: {line!r} is not an absolute tinker_core.proto import"
                )
    assert sorted(p.name for p in PROTO_DIR.glob("*_pb2.pyi")) == [
        "common_pb2.pyi", "env_pb2.pyi", "jobs_pb2.pyi", "training_pb2.pyi",
    ]


def test_importing_tinker_core_or_the_messages_does_not_import_grpc_or_torch():
    code = (
        "import sys, tinker_core\n"
        "from tinker_core import EnvSpec\n"
        "import tinker_core.proto\n"
        "from tinker_core.proto import env_pb2, jobs_pb2, training_pb2, tensors\n"
        "assert 'grpc' not in sys.modules, 'grpc imported'\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "import tinker_core.remote\n"
        "assert 'grpc' in sys.modules and 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- messages -----------------------------------------------------------------------------------


def test_job_states_and_job_fields():
    names = [v.name for v in jobs_pb2.JobState.DESCRIPTOR.values]
    assert names == [
        "JOB_STATE_UNSPECIFIED", "JOB_STATE_QUEUED", "JOB_STATE_RUNNING",
        "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_PAUSED",
    ]
    assert jobs_pb2.JOB_STATE_UNSPECIFIED == 0
    job = jobs_pb2.Job(
        id="job-1", state=jobs_pb2.JOB_STATE_RUNNING, reason="", priority=5, tenant="acme",
        run_dir="/runs/job-1", checkpoint_path="/runs/job-1/ckpt/step-10", config_text="name: x\n",
    )
    job.created_at.FromSeconds(1_700_000_000)
    job.started_at.FromSeconds(1_700_000_005)
    back = jobs_pb2.Job.FromString(job.SerializeToString())
    assert back == job
    assert back.started_at.ToSeconds() - back.created_at.ToSeconds() == 5
    assert not back.HasField("finished_at")  # unset until the job finishes


def test_submit_is_tenantless_with_an_idempotence_key_and_optional_priority():
    fields = set(jobs_pb2.SubmitJobRequest.DESCRIPTOR.fields_by_name)
    assert fields == {"config_text", "config_format", "client_request_id", "priority"}
    request = jobs_pb2.SubmitJobRequest(config_text="{}", client_request_id="r1")
    assert not request.HasField("priority")  # unset: the config's priority applies
    request.priority = 0
    assert request.HasField("priority")


def test_job_events_carry_a_cursor_and_exactly_one_payload():
    event = jobs_pb2.JobEvent(cursor=7, job_id="job-1")
    event.metrics.step = 3
    event.metrics.values["losses/policy"] = 0.25
    assert event.WhichOneof("event") == "metrics"
    event.log.text = "hello"  # setting another payload replaces the first
    assert event.WhichOneof("event") == "log"
    back = jobs_pb2.JobEvent.FromString(event.SerializeToString())
    assert (back.cursor, back.log.text, back.HasField("metrics")) == (7, "hello", False)
    watch = jobs_pb2.WatchJobRequest(job_id="job-1", after_cursor=7)
    assert jobs_pb2.WatchJobRequest.FromString(watch.SerializeToString()).after_cursor == 7


def test_datum_fields_are_packed_on_the_wire():
    n = 1000
    datum = training_pb2.Datum(tokens=[5] * n)
    # packed: one tag + one length + n one-byte varints; unpacked would spend a tag per value
    assert len(datum.SerializeToString()) <= n + 4
    datum = training_pb2.Datum(
        tokens=list(range(n)),
        loss_weights=[0.0] * 10 + [1.0] * (n - 10),
        target_tokens=list(range(1, n + 1)),
        advantages=[0.5] * n,
        sampling_logprobs=[-1.25] * n,
    )
    datum.extra_inputs["returns"].CopyFrom(tensors.to_tensor(np.ones(n, dtype=np.float32)))
    back = training_pb2.Datum.FromString(datum.SerializeToString())
    assert list(back.tokens) == list(range(n)) and list(back.sampling_logprobs) == [-1.25] * n
    np.testing.assert_array_equal(tensors.from_tensor(back.extra_inputs["returns"]), np.ones(n))
    for name in ("tokens", "loss_weights", "target_tokens", "advantages", "sampling_logprobs"):
        assert training_pb2.Datum.DESCRIPTOR.fields_by_name[name].is_packed, name


def test_sampling_params_distinguish_unset_from_zero():
    params = training_pb2.SamplingParams(max_tokens=16)
    assert not params.HasField("temperature") and not params.HasField("seed")
    params.temperature = 0.0  # greedy, distinct from "unset"
    params.seed = 0
    back = training_pb2.SamplingParams.FromString(params.SerializeToString())
    assert back.HasField("temperature") and back.temperature == 0.0 and back.HasField("seed")
    adam = training_pb2.AdamParams.DESCRIPTOR.fields_by_name
    assert {"learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm"} <= set(adam)


def test_env_observations_are_text_or_chat():
    text = env_pb2.Observation(text="")
    assert text.WhichOneof("value") == "text"  # an empty text observation is still text
    chat = env_pb2.Observation(chat=env_pb2.ChatMessages(messages=[env_pb2.ChatMessage(role="user", content="hi")]))
    assert env_pb2.Observation.FromString(chat.SerializeToString()).chat.messages[0].content == "hi"
    reset = env_pb2.ResetRequest(session_id="s")
    assert not reset.HasField("seed")
    reset.seed = 0
    assert reset.HasField("seed")


# ---- tensors ------------------------------------------------------------------------------------

DTYPES = ["float32", "float64", "int32", "int64", "bool", "uint8", "float16"]


def _array(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(0)
    values = rng.normal(size=shape) * 100
    if dtype == "bool":
        return values > 0
    return values.astype(dtype)


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 3, 4)])
def test_tensor_round_trip_is_exact(dtype: str, shape: tuple[int, ...], raw: bool):
    array = _array(dtype, shape)
    message = tensors.to_tensor(array, raw=raw)
    back = tensors.from_tensor(common_pb2.Tensor.FromString(message.SerializeToString()))
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    if raw or dtype == "float16":
        assert not (message.float_data or message.double_data or message.int32_data or message.int64_data)


def test_bfloat16_decodes_to_the_float32_it_truncates():
    values = np.array([1.0, -2.5, 3.140625, 0.0], dtype=np.float32)  # exactly representable in bf16
    bits = (values.view(np.uint32) >> 16).astype("<u2")
    tensor = common_pb2.Tensor(dtype=common_pb2.DTYPE_BFLOAT16, shape=[4], raw_data=bits.tobytes())
    np.testing.assert_array_equal(tensors.from_tensor(tensor), values)


def test_inconsistent_tensors_are_refused_naming_the_problem():
    with pytest.raises(ValueError, match="float_data has 3 values but shape"):
        tensors.from_tensor(common_pb2.Tensor(dtype=common_pb2.DTYPE_FLOAT32, shape=[2, 2], float_data=[1, 2, 3]))
    with pytest.raises(ValueError, match="travels in float_data, but int64_data is set"):
        tensors.from_tensor(common_pb2.Tensor(dtype=common_pb2.DTYPE_FLOAT32, shape=[1], int64_data=[1]))
    with pytest.raises(ValueError, match="raw data has 3 bytes"):
        tensors.from_tensor(common_pb2.Tensor(dtype=common_pb2.DTYPE_INT32, shape=[1], raw_data=b"abc"))
    with pytest.raises(ValueError, match="not an element type"):
        tensors.from_tensor(common_pb2.Tensor(shape=[1], float_data=[1.0]))
    with pytest.raises(ValueError, match="cannot travel"):
        tensors.to_tensor(np.array(["a"]))


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 1 << 20])
def test_chunked_tensors_reassemble_exactly(chunk_bytes: int):
    arrays = {
        "layer.0.weight": _array("float32", (8, 5)),
        "empty": _array("int64", (0, 3)),
        "layer.0.bias": _array("float16", (5,)),
        "mask": _array("bool", (3, 3)),
    }
    chunks = [c for name, a in arrays.items() for c in tensors.iter_tensor_chunks(name, a, chunk_bytes)]
    assert all(len(c.data) <= chunk_bytes for c in chunks)
    wire = [common_pb2.TensorChunk.FromString(c.SerializeToString()) for c in chunks]
    back = tensors.join_tensor_chunks(wire)
    assert list(back) == list(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        np.testing.assert_array_equal(back[name], array)


def test_broken_chunk_streams_are_refused():
    chunks = list(tensors.iter_tensor_chunks("w", np.arange(10, dtype=np.int32), chunk_bytes=8))
    assert len(chunks) == 5
    with pytest.raises(ValueError, match="chunks lost or out of order"):
        tensors.join_tensor_chunks([chunks[0], chunks[2]])
    with pytest.raises(ValueError, match="starts at offset 8"):
        tensors.join_tensor_chunks(chunks[1:])
    with pytest.raises(ValueError, match="ended inside tensor 'w': 16 of 40 bytes"):
        tensors.join_tensor_chunks(chunks[:2])
    with pytest.raises(ValueError, match="arrives twice"):
        tensors.join_tensor_chunks(chunks + chunks)
    with pytest.raises(ValueError, match="chunk_bytes must be > 0"):
        list(tensors.iter_tensor_chunks("w", np.zeros(1), chunk_bytes=0))


def test_request_key_names_the_call_not_its_request_id():
    from tinker_core.proto import request_key

    a = env_pb2.StepRequest(session_id="s", action="42", request_id="r1")
    same_call_other_id = env_pb2.StepRequest(session_id="s", action="42", request_id="r2")
    other_action = env_pb2.StepRequest(session_id="s", action="43", request_id="r1")
    assert request_key("Step", a) == request_key("Step", same_call_other_id)
    assert request_key("Step", a) != request_key("Step", other_action)
    assert request_key("Step", a) != request_key("Reset", a)
    assert a.request_id == "r1"  # the request itself is left as it was


def test_model_info_is_one_class_for_both_sides_of_the_wire():
    from tinker_core.proto.model_info import ModelInfo

    info = ModelInfo(base_model="tiny", lora_rank=4, lora_alpha=8.0, tokenizer_id="tok", vocab_size=96,
                     step=3, model_type="llama", trainable_parameters=1234, context_length=512)
    assert ModelInfo.from_proto(info.to_proto()) == info
    unknown = ModelInfo(**{**info.__dict__, "context_length": None})  # the host: the config does not say
    assert unknown.to_proto().context_length == 0
    assert ModelInfo.from_proto(unknown.to_proto()).context_length == 0  # the wire's "unknown"
