"""The Tinker ecosystem check: the registry's ``tinker`` SDK and ``tinker-cookbook`` (pins in
``tinker_sdk/sdk_venv.py``), in their own virtual environment, run unmodified against
``opentinker scheduler start --tinker-port``:

(a) ``tinker_sdk/sdk_roundtrip.py``: train, sample, save and restore a LoRA with its optimizer;
(b) the cookbook's ``tinker_cookbook.recipes.math_rl.train`` with ``env=arithmetic``, two steps;
(c) ``tinker_sdk/custom_loss.py``: ``forward_backward_custom`` with a loss written on the client;
(c') ``tinker_sdk/cookbook_download.py``: the cookbook's ``weights.download`` of a saved state
    (an age-encrypted export through signed URLs), loaded back with peft;
(d) more recipes, each for two steps with the exact command of the guide's recipe table
    (``docs/guides/tinker-api.md``): ``chat_sl.train`` on the cookbook's own
    ``example_data/conversations.jsonl`` (supervised), ``preference.shorter.train`` (pairwise
    preferences), ``multiplayer_rl.guess_number.train`` (multi-turn) and
    ``multiplayer_rl.text_arena.train`` (two-player tic-tac-toe, self-play), and ``math_rl`` with
    ``max_steps_off_policy=1`` (the cookbook's asynchronous RL).

The models are the tiny preset, written to a directory under the scheduler's ``--model-root``,
and the same with a 4096-token context (the multi-turn games: their prompts outgrow the preset's
1024 characters): the cookbook loads the tokenizer of ``model_name`` with
``from_pretrained``, so the name must be a directory (no hub at run time). The environment is made once per machine and pin set (about
10 s with a warm uv cache; a cold one downloads torch) and reused from ``$OPENTINKER_CACHE``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "tinker_sdk"
pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="makes its virtual environment with uv")


def _sdk_venv():
    spec = importlib.util.spec_from_file_location("sdk_venv", HERE / "sdk_venv.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sdk_python(tmp_path_factory) -> Path:
    log = tmp_path_factory.mktemp("sdk-venv") / "install.log"
    try:
        return _sdk_venv().venv_python(log=log)
    except RuntimeError as e:
        pytest.fail(f"could not make the tinker/tinker-cookbook environment: {e}")


def build_long_context_tiny(path: Path) -> Path:
    """The tiny preset's shape and character tokenizer with a 4096-token context (the preset's is
    1024), for the multi-turn games whose prompts grow with every turn."""
    import torch
    from transformers import LlamaForCausalLM

    from tinker_algos.model.models import tiny_config
    from tinker_algos.model.tokenizer import build_char_tokenizer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(tiny_config(max_position_embeddings=4096)).save_pretrained(path)
    build_char_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A scheduler started as a user would, with the Tinker API on a free port, and a tenant key;
    ``--model-root`` holds the tiny preset's directory and its 4096-token-context variant's."""
    pytest.importorskip("tinker_scheduler", reason="needs tinker-scheduler (the integration session installs it)")
    from tinker_algos.model.models import build_tiny_model
    from tinker_scheduler.testing import running_scheduler

    tmp = tmp_path_factory.mktemp("tinker-gateway")
    tiny = build_tiny_model(tmp / "models" / "tiny")
    tiny_4k = build_long_context_tiny(tmp / "models" / "tiny-4k")
    with running_scheduler(tmp, "--model-root", str(tmp / "models"), tenant="alice", tinker=True) as process:
        yield {"url": process.tinker_url, "key": "tml-" + process.api_key, "model": str(tiny),
               "model_4k": str(tiny_4k), "tmp": tmp}


def run_sdk(python: Path, gateway: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python *args`` as the separate environment's user: only the gateway's URL and key set."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(TINKER_BASE_URL=gateway["url"], TINKER_API_KEY=gateway["key"], HF_HUB_OFFLINE="1",
               TINKER_TELEMETRY="0", PYTHONNOUSERSITE="1", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run([str(python), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=480)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return r


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_sdk_trains_samples_saves_and_restores_with_optimizer(sdk_python, gateway, tmp_path) -> None:
    out = last_json(run_sdk(sdk_python, gateway, str(HERE / "sdk_roundtrip.py"), gateway["model"], cwd=tmp_path).stdout)
    assert out["tinker"].startswith("0.38.")
    assert Path(out["tinker_file"]).is_relative_to(sdk_python.parent.parent)  # the registry's SDK, not ours
    assert out["losses"][0] > out["losses"][1] > out["losses"][2], out["losses"]
    assert len(out["samples"]) == 2 and all(1 <= len(s) <= 4 for s in out["samples"])
    assert out["state"] == f"tinker://{out['model_id']}/weights/after-3"
    assert out["restored_model_id"] != out["model_id"]
    assert out["loss_restored"] == pytest.approx(out["loss_before"], rel=1e-5)  # same weights
    a, b = out["loss_stepped"]  # the same Adam moments: the next identical step stays identical
    assert a == pytest.approx(b, rel=1e-5) and a < out["loss_before"]


def test_cookbook_weights_download_gives_the_trained_adapter(sdk_python, gateway, tmp_path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = last_json(run_sdk(sdk_python, gateway, str(HERE / "cookbook_download.py"), gateway["model"],
                            str(tmp_path / "adapter"), cwd=tmp_path).stdout)
    assert out["files"] == ["adapter_config.json", "adapter_model.safetensors"]
    assert "external" not in out["checkpoint_types_left"]  # the temporary export was deleted
    base = AutoModelForCausalLM.from_pretrained(gateway["model"])
    model = PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    seq = out["seq"]
    with torch.no_grad():
        logits = model(torch.tensor([seq[:-1]])).logits[0].float()
    logprobs = torch.log_softmax(logits, -1).gather(1, torch.tensor(seq[1:])[:, None])[:, 0].tolist()
    assert logprobs == pytest.approx(out["logprobs"], abs=1e-4)  # the trained weights, exactly


def test_cookbook_math_rl_arithmetic_runs_its_steps(sdk_python, gateway, tmp_path) -> None:
    log_path = tmp_path / "math_rl"
    r = run_sdk(sdk_python, gateway, "-m", "tinker_cookbook.recipes.math_rl.train", f"model_name={gateway['model']}",
                "renderer_name=role_colon", "env=arithmetic", "group_size=2", "groups_per_batch=2", "max_tokens=4",
                "lora_rank=4", "learning_rate=1e-3", "max_steps=2",  # the default loss_fn: stable_reinforce
                f"log_path={log_path}", "behavior_if_log_dir_exists=delete", "eval_every=0", "save_every=0",
                cwd=tmp_path)
    assert "Training completed successfully" in r.stdout + r.stderr
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "optim/step" in row]
    assert [row["step"] for row in steps] == [0, 1]
    for row in steps:
        assert row["env/all/total_episodes"] == 4 and "env/all/reward/total" in row and row["tokens/trained"] > 0
    final = json.loads((log_path / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert final["name"] == "final" and final["state_path"].startswith("tinker://")


def test_forward_backward_custom_loss(sdk_python, gateway, tmp_path) -> None:
    out = last_json(run_sdk(sdk_python, gateway, str(HERE / "custom_loss.py"), gateway["model"], cwd=tmp_path).stdout)
    assert out["nll"][0] > out["nll"][1] > out["nll"][2], out["nll"]  # the custom loss is what trains
    # the custom mean agrees with the server's own cross-entropy sum over the same tokens
    assert out["final_mean_nll"] == pytest.approx(out["ce_sum"] / out["n_targets"], rel=1e-4)


def recipe(sdk_python: Path, gateway: dict, tmp_path: Path, module: str, *args: str) -> list[dict]:
    """``python -m tinker_cookbook.recipes.<module>`` with ``args`` and a fresh ``log_path``; its
    metrics rows, after checking it completed and saved its final checkpoint."""
    log_path = tmp_path / "log"
    r = run_sdk(sdk_python, gateway, "-m", f"tinker_cookbook.recipes.{module}", *args, f"log_path={log_path}",
                "behavior_if_log_dir_exists=delete", cwd=tmp_path)
    assert "Training completed successfully" in r.stdout + r.stderr
    final = json.loads((log_path / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert final["name"] == "final" and final["state_path"].startswith("tinker://")
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def test_cookbook_supervised_chat_sl_on_its_example_conversations(sdk_python, gateway, tmp_path) -> None:
    data = Path(sdk_python).parent.parent.glob("lib/python*/site-packages/tinker_cookbook/example_data/conversations.jsonl")
    rows = recipe(sdk_python, gateway, tmp_path, "chat_sl.train", f"model_name={gateway['model']}",
                  "renderer_name=role_colon", f"dataset={next(data)}", "batch_size=4", "max_length=256",
                  "lora_rank=4", "max_steps=2", "eval_every=0", "save_every=0")
    steps = [row for row in rows if "train_mean_nll" in row]
    assert [row["step"] for row in steps] == [0, 1]
    assert all(row["tokens/trained"] > 0 and row["train_mean_nll"] > 0 for row in steps)


def test_cookbook_preference_shorter_runs_its_steps(sdk_python, gateway, tmp_path) -> None:
    rows = recipe(sdk_python, gateway, tmp_path, "preference.shorter.train", f"model_name={gateway['model']}",
                  "renderer_name=role_colon", "batch_size=2", "group_size=2", "max_tokens=4", "max_steps=2",
                  "eval_every=0")
    steps = [row for row in rows if "optim/step" in row]
    assert [row["step"] for row in steps] == [0, 1]
    assert all("env/all/reward/total" in row and row["tokens/trained"] > 0 for row in steps)


def test_cookbook_math_rl_async_off_policy_runs_its_steps(sdk_python, gateway, tmp_path) -> None:
    rows = recipe(sdk_python, gateway, tmp_path, "math_rl.train", f"model_name={gateway['model']}",
                  "renderer_name=role_colon", "env=arithmetic", "group_size=2", "groups_per_batch=2", "max_tokens=4",
                  "lora_rank=4", "learning_rate=1e-3", "max_steps=3", "max_steps_off_policy=1", "eval_every=0",
                  "save_every=0")
    steps = [row for row in rows if "optim/step" in row]
    assert [row["step"] for row in steps] == [0, 1, 2]
    assert all("async/staleness_max" in row for row in steps)  # the asynchronous loop ran, not the synchronous one


def test_cookbook_multi_turn_guess_number_runs_its_steps(sdk_python, gateway, tmp_path) -> None:
    rows = recipe(sdk_python, gateway, tmp_path, "multiplayer_rl.guess_number.train",
                  f"model_name={gateway['model_4k']}", "renderer_name=role_colon", "batch_size=1", "group_size=2",
                  "max_tokens=8", "max_steps=2", "eval_every=0", "save_every=0")
    steps = [row for row in rows if "optim/step" in row]
    assert [row["step"] for row in steps] == [0, 1]
    assert all(row["env/all/total_episodes"] == 2 and row["env/all/turns_per_episode"] >= 1 for row in steps)


def test_cookbook_two_player_tic_tac_toe_self_play_runs_its_steps(sdk_python, gateway, tmp_path) -> None:
    rows = recipe(sdk_python, gateway, tmp_path, "multiplayer_rl.text_arena.train",
                  f"model_name={gateway['model_4k']}", "renderer_name=role_colon", "batch_size=2",
                  "num_train_datapoints=4", "num_test_datapoints=2", "max_tokens=8", "max_steps=2", "eval_every=0",
                  "save_every=0")
    steps = [row for row in rows if "optim/step" in row]
    assert [row["step"] for row in steps] == [0, 1]
    assert all(row["env/all/total_episodes"] == 2 for row in steps)  # both players of one game, one policy
