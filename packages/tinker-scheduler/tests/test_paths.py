"""Path confinement: run directories under the runs dir, base models and data files from an
allow-list, the same refusal whether a forbidden path exists or not."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from typer.testing import CliRunner

from tinker_core.config import parse_config
from tinker_core.proto import jobs_pb2, training_pb2, training_pb2_grpc
from tinker_scheduler.cli import app
from tinker_scheduler.config import SchedulerConfig
from tinker_scheduler.errors import StatusError
from tinker_scheduler.paths import PathPolicy
from tinker_scheduler.testing import JobStub, job_config_text


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """runs/{alice,bob}/..., a model root with a model, and a private directory outside both."""
    monkeypatch.chdir(tmp_path)
    runs, models, private = tmp_path / "runs", tmp_path / "models", tmp_path / "private"
    for d in (runs / "alice" / "job-a" / "checkpoints" / "step-1", runs / "bob" / "job-b" / "checkpoints" / "step-1",
              models / "llama", private / "weights"):
        d.mkdir(parents=True)
    (private / "data.jsonl").write_text('{"prompt": "secret", "completion": "x"}\n')
    (models / "data.jsonl").write_text('{"prompt": "1+1=", "completion": "2"}\n')
    return PathPolicy(runs, [models]), tmp_path


def refusal(check, *args) -> tuple[str, str]:
    with pytest.raises(StatusError) as info:
        check(*args)
    return info.value.code, str(info.value)


def test_presets_hub_ids_model_roots_and_own_runs_are_allowed(layout):
    policy, root = layout
    for name in ("tiny", "tiny:3", "gpt2", "Qwen/Qwen2.5-0.5B", str(root / "models" / "llama"),
                 str(root / "runs" / "alice" / "job-a" / "checkpoints" / "step-1"), "models/llama"):
        policy.check_model(name, "alice")
    policy.check_data(str(root / "models" / "data.jsonl"), "alice")
    policy.check_data(str(root / "runs" / "alice" / "job-a" / "out.jsonl"), "alice")


def test_forbidden_paths_get_one_message_whether_they_exist_or_not(layout):
    policy, root = layout
    bob = root / "runs" / "bob" / "job-b" / "checkpoints" / "step-1"
    for existing, missing in [
        (bob, bob.parent / "step-9"),  # another tenant's checkpoint
        (root / "private" / "weights", root / "private" / "nothing"),  # outside every root
        (root / "models" / ".." / "private" / "weights", root / "models" / ".." / "private" / "nothing"),
    ]:
        code, seen = refusal(policy.check_model, str(existing), "alice")
        _, unseen = refusal(policy.check_model, str(missing), "alice")
        assert code == "PERMISSION_DENIED"
        assert seen.replace(str(existing), "X") == unseen.replace(str(missing), "X")
        assert seen.startswith("model.name: ") and "--model-root" in seen and "\n" not in seen
    data, nodata = root / "private" / "data.jsonl", root / "private" / "none.jsonl"
    assert refusal(policy.check_data, str(data), "alice")[1].replace(str(data), "X") == \
        refusal(policy.check_data, str(nodata), "alice")[1].replace(str(nodata), "X")


def test_a_model_root_never_opens_another_tenants_runs_and_symlinks_are_followed(layout):
    policy, root = layout
    wide = PathPolicy(root / "runs", [root])  # a root that holds the runs directory
    wide.check_model(str(root / "models" / "llama"), "alice")
    assert refusal(wide.check_model, str(root / "runs" / "bob" / "job-b"), "alice")[0] == "PERMISSION_DENIED"
    (root / "models" / "innocent").symlink_to(root / "runs" / "bob" / "job-b")
    assert refusal(policy.check_model, str(root / "models" / "innocent"), "alice")[0] == "PERMISSION_DENIED"
    # a hub-id-shaped name that is a path on the server is checked as a path
    assert refusal(policy.check_model, "private", "alice")[0] == "PERMISSION_DENIED"
    assert refusal(policy.check_model, "runs/bob", "alice")[0] == "PERMISSION_DENIED"


def test_run_dirs_stay_under_the_runs_dir(layout):
    policy, root = layout
    assert policy.run_dir("alice", "job-1") == (root / "runs" / "alice" / "job-1").resolve()
    for tenant, job in (("..", "x"), ("a/b", "x"), ("alice", "../bob"), ("alice", "..")):
        assert refusal(policy.run_dir, tenant, job)[0] == "INVALID_ARGUMENT"


def test_check_job_names_the_field_of_each_path(layout):
    policy, root = layout
    secret = str(root / "private" / "data.jsonl")
    config = parse_config({
        "model": {"name": "tiny", "tokenizer": str(root / "private" / "weights")},
        "stages": [{"algorithm": {"name": "sft", "data": str(root / "models" / "data.jsonl")}},
                   {"algorithm": {"name": "dpo", "params": {"eval_data": secret}}}],
    }, check_plugins=False)
    assert refusal(policy.check_job, config, "alice")[1].startswith("model.tokenizer: ")
    config = config.model_copy(update={"model": config.model.model_copy(update={"tokenizer": None})})
    assert refusal(policy.check_job, config, "alice")[1].startswith("stages[1].algorithm.params.eval_data: ")


def test_data_sources_are_checked_by_their_path_or_their_hub_value(layout):
    policy, root = layout

    def job(data: object) -> object:
        return parse_config({"model": {"name": "tiny"}, "algorithm": {"name": "sft", "data": data}}, check_plugins=False)

    policy.check_job(job({"path": str(root / "models" / "data.jsonl"), "split": "train"}), "alice")
    policy.check_job(job({"hub": "openai/gsm8k", "config": "main"}), "alice")  # a hub id: downloaded, as models are
    for data, field in [({"path": str(root / "private" / "data.jsonl"), "max_rows": 3}, "algorithm.data: "),
                        ({"hub": str(root / "private")}, "algorithm.data.hub: "),  # load_dataset reads a local folder
                        ({"hub": "private"}, "algorithm.data.hub: ")]:  # a hub-id-shaped name that is a path here
        code, message = refusal(policy.check_job, job(data), "alice")
        assert code == "PERMISSION_DENIED" and message.startswith(field), message


def test_model_roots_in_the_config_and_the_cli(tmp_path):
    assert SchedulerConfig(model_roots=[str(tmp_path)]).model_roots == (tmp_path,)
    assert SchedulerConfig(model_roots=str(tmp_path)).model_roots == (tmp_path,)
    result = CliRunner().invoke(app, ["start", "--model-root", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert f"--model-root: {tmp_path / 'missing'} is not a directory" in result.output


def test_submit_refuses_another_tenants_checkpoint_and_private_data(make_scheduler, tmp_path):
    scheduler = make_scheduler(paused=True)
    alice, bob = scheduler.store.add_tenant("alice"), scheduler.store.add_tenant("bob")
    bob_ckpt = scheduler.runs_dir / "bob" / "job-b" / "checkpoints" / "step-1"
    bob_ckpt.mkdir(parents=True)

    def submit(key: str, **sections: object) -> tuple[grpc.StatusCode, str]:
        config = {"name": "t", "algorithm": {"name": "sft", "steps": 1}, **sections}
        with JobStub(scheduler.address, api_key=key) as client, pytest.raises(grpc.RpcError) as info:
            client.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=json.dumps(config)), metadata=client.metadata, timeout=10)
        return info.value.code(), info.value.details()

    code, seen = submit(alice, model={"name": str(bob_ckpt)})
    _, unseen = submit(alice, model={"name": str(bob_ckpt.parent / "step-2")})
    assert code == grpc.StatusCode.PERMISSION_DENIED and seen.startswith("model.name: ")
    assert seen.replace("step-1", "N") == unseen.replace("step-2", "N")
    code, details = submit(alice, algorithm={"name": "sft", "steps": 1, "data": str(tmp_path / "secret.jsonl")})
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("algorithm.data: ")
    with JobStub(scheduler.address, api_key=bob) as client:  # bob's own checkpoint is fine for bob
        job = client.stub.Submit(jobs_pb2.SubmitJobRequest(
            config_text=job_config_text().replace("algorithm:", f"model: {{name: '{bob_ckpt}'}}\nalgorithm:")),
            metadata=client.metadata, timeout=10)
    assert Path(job.run_dir).parent == scheduler.runs_dir / "bob"


def test_create_session_refuses_a_base_model_outside_the_allow_list(make_scheduler, tmp_path):
    scheduler = make_scheduler(paused=True, training_host_backend="local")
    bob_ckpt = scheduler.runs_dir / "bob" / "sessions" / "ts-1" / "state"
    bob_ckpt.mkdir(parents=True)
    with grpc.insecure_channel(scheduler.address) as channel:
        stub = training_pb2_grpc.TrainingServiceStub(channel)
        details = []
        for path in (bob_ckpt, bob_ckpt.parent / "nothing", tmp_path / "elsewhere"):
            with pytest.raises(grpc.RpcError) as info:
                stub.CreateSession(training_pb2.CreateTrainingSessionRequest(base_model=str(path), lora_rank=4), timeout=30)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            details.append(info.value.details().replace(str(path), "X"))
    assert details[0].startswith("base_model: ") and len(set(details)) == 1


def test_paths_in_env_arguments_are_confined_and_named_by_their_key(layout):
    policy, root = layout
    allowed, secret = str(root / "models" / "data.jsonl"), str(root / "private" / "data.jsonl")
    missing, bob = str(root / "private" / "none.jsonl"), str(root / "runs" / "bob" / "job-b" / "out.jsonl")

    def job(env: dict) -> object:
        return parse_config({"algorithm": {"name": "grpo", "steps": 1}, "env": env}, check_plugins=False)

    # math/dataset-v0's `path`, under a model root or the tenant's own runs; URLs and plain words pass
    policy.check_job(job({"id": "math/dataset-v0", "kwargs": {"path": allowed}}), "alice")
    policy.check_job(job({"id": "math/dataset-v0", "kwargs": {"path": str(root / "runs" / "alice" / "job-a" / "d.jsonl")}}), "alice")
    policy.check_job(job({"id": "echo/echo-v0", "kwargs": {"words": ["ab", "+-*/", "a/b"], "url": "https://x.org/d.jsonl"}}), "alice")
    cases = [
        ({"path": secret}, "env.kwargs.path"),
        ({"path": "../private/data.jsonl"}, "env.kwargs.path"),  # relative, resolved first
        ({"path": bob}, "env.kwargs.path"),  # another tenant's runs
        ({"eval_file": "private/data.jsonl"}, "env.kwargs.eval_file"),  # a path by its key's name
        ({"sources": [allowed, secret]}, "env.kwargs.sources[1]"),  # a path by its shape, in a list
        ({"nested": {"data_dirs": ["private"]}}, "env.kwargs.nested.data_dirs[0]"),
        ({"questions": "file:///etc/passwd"}, "env.kwargs.questions"),
        ({"home": "~/secrets.jsonl"}, "env.kwargs.home"),
    ]
    for kwargs, field in cases:
        code, message = refusal(policy.check_job, job({"id": "math/dataset-v0", "kwargs": kwargs}), "alice")
        assert code == "PERMISSION_DENIED" and message.startswith(f"{field}: ") and "\n" not in message, message
    code, message = refusal(policy.check_job, job({"id": "math/dataset-v0", "eval_kwargs": {"path": secret}}), "alice")
    assert message.startswith("env.eval_kwargs.path: ")
    staged = parse_config({"stages": [{"algorithm": {"name": "grpo", "steps": 1},
                                       "env": {"id": "math/dataset-v0", "kwargs": {"path": secret}}}]}, check_plugins=False)
    assert refusal(policy.check_job, staged, "alice")[1].startswith("stages[0].env.kwargs.path: ")
    # the same text whether the file exists or not
    seen = refusal(policy.check_job, job({"id": "math/dataset-v0", "kwargs": {"path": secret}}), "alice")[1]
    unseen = refusal(policy.check_job, job({"id": "math/dataset-v0", "kwargs": {"path": missing}}), "alice")[1]
    assert seen.replace(secret, "X") == unseen.replace(missing, "X")


def test_submit_refuses_an_env_dataset_path_outside_the_allowed_roots(make_scheduler, tmp_path):
    scheduler = make_scheduler(paused=True)
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    details = []
    for path in (secret, tmp_path / "missing.jsonl"):
        config = {"name": "t", "algorithm": {"name": "grpo", "steps": 1},
                  # (echo stands in for math/dataset-v0, which this package's tests do not
                  # install: the rule is about the argument, checked before any env is built)
                  "env": {"id": "echo/echo-v0", "kwargs": {"path": str(path)}}}
        with JobStub(scheduler.address) as client, pytest.raises(grpc.RpcError) as info:
            client.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=json.dumps(config)), metadata=client.metadata, timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        details.append(info.value.details().replace(str(path), "X"))
    assert details[0].startswith("env.kwargs.path: ") and details[0] == details[1]
