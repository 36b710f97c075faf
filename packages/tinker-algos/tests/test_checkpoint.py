"""Checkpoints: exact resume, HF/peft-loadable weights, atomic writes, last good weights, checksums."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from tinker_algos.model.device import seed_everything
from tinker_algos.model.models import LoraSpec, PolicyModel
from tinker_algos.sampling.sampler import SamplingParams, sample, sequences_to_batch
from tinker_algos.training.checkpoint import (
    CheckpointError,
    load_state,
    read_manifest,
    save_state,
    verify,
)
from tinker_algos.training.trainer import Trainer, TrainerConfig, restore_trainer

pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")

CONFIG = TrainerConfig(lr=1e-2, schedule="cosine", warmup_steps=1, total_steps=6, weight_decay=0.01)


def rl_step(trainer: Trainer) -> dict[str, float]:
    """One step that draws from every RNG: torch (sampling, LoRA dropout), numpy, python."""
    seqs = sample(trainer.policy, ["Q:", "A:"], SamplingParams(max_new_tokens=6), adapter=trainer.adapter)
    batch = sequences_to_batch(seqs, pad_token_id=trainer.policy.pad_token_id)
    adv = np.random.randn(batch.shape[0], 1).astype(np.float32) * random.random()
    batch.advantages_B_T = adv * batch.loss_mask_B_T
    m = trainer.forward_backward(batch, "importance_sampling")
    m.update(trainer.optim_step())
    return m


def make_trainer(tiny_dir, adapter=None):
    policy = PolicyModel.load(tiny_dir, device="cpu")
    lora = LoraSpec(rank=4, dropout=0.1) if adapter else None
    return Trainer(policy, CONFIG, adapter=adapter, lora=lora, adapter_seed=0 if adapter else None)


@pytest.mark.parametrize("adapter", [None, "learner"])
def test_resume_is_bit_identical_to_not_stopping(tiny_dir, tmp_path, adapter):
    seed_everything(0)
    first = make_trainer(tiny_dir, adapter)
    for _ in range(2):
        rl_step(first)
    ckpt = first.save_state(tmp_path / "ckpt", data_cursor={"epoch": 0, "index": 8})
    expected = [rl_step(first) for _ in range(2)]

    seed_everything(12345)  # a different RNG state: the checkpoint must restore it
    resumed = make_trainer(tiny_dir, adapter)
    manifest = resumed.load_state(ckpt)
    assert manifest["data_cursor"] == {"epoch": 0, "index": 8}
    assert resumed.step == 2
    got = [rl_step(resumed) for _ in range(2)]
    assert got == expected  # every metric, exactly
    for a, b in zip(first.params, resumed.params, strict=True):
        assert torch.equal(a, b)
    sa, sb = first.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for name in sa[k]:
            assert torch.equal(torch.as_tensor(sa[k][name]), torch.as_tensor(sb[k][name]))


def test_manifest_and_layout_of_a_full_checkpoint(tiny_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer = make_trainer(tiny_dir)
    rl_step(trainer)
    path = save_state(tmp_path / "full", trainer, data_cursor={"i": 3})
    m = read_manifest(path)
    assert m["format_version"] == 1 and m["kind"] == "opentinker-checkpoint"
    assert m["step"] == 1 and m["base_model"] == str(tiny_dir) and m["adapter_name"] is None
    assert set(m["contents"]) >= {"model", "optimizer", "scheduler", "rng", "data_cursor"}
    assert m["trainer_config"]["schedule"] == "cosine"
    # the weights are a normal HF model directory
    loaded = AutoModelForCausalLM.from_pretrained(path / "model")
    for (n, p), q in zip(loaded.named_parameters(), trainer.params, strict=True):
        assert torch.equal(p, q), n
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_saved_adapter_loads_with_peft_from_pretrained(tiny_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    trainer = make_trainer(tiny_dir, "learner")
    for _ in range(2):
        rl_step(trainer)
    path = trainer.save_state(tmp_path / "lora")
    m = read_manifest(path)
    assert m["adapter_name"] == "learner" and m["adapter_config"]["rank"] == 4
    assert "adapter" in m["contents"] and "model" not in m["contents"]
    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    peft_model = PeftModel.from_pretrained(base, path / "adapter")
    peft_model.eval()
    seqs = sample(trainer.policy, ["Q:"], SamplingParams(max_new_tokens=8, seed=0), adapter="learner")
    batch = sequences_to_batch(seqs)
    tokens = torch.as_tensor(batch.tokens_B_T)
    with torch.no_grad():
        logits = peft_model(input_ids=tokens).logits[0]
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, tokens[0, 1:, None]).squeeze(-1).numpy()
    np.testing.assert_allclose(lp, trainer.forward(batch)[0, 1:], atol=1e-5)
    assert np.abs(lp - Trainer(PolicyModel.load(tiny_dir, device="cpu")).forward(batch)[0, 1:]).max() > 1e-4


def test_a_checkpoint_after_a_skipped_step_holds_the_last_good_weights(tiny_dir, tmp_path):
    trainer = make_trainer(tiny_dir)
    rl_step(trainer)
    good = [p.detach().clone() for p in trainer.params]
    seqs = sample(trainer.policy, ["Q:"], SamplingParams(max_new_tokens=4, seed=0))
    batch = sequences_to_batch(seqs)
    batch.advantages_B_T = np.where(batch.loss_mask_B_T > 0, np.inf, 0.0).astype(np.float32)
    trainer.forward_backward(batch, "importance_sampling")
    assert trainer.optim_step()["skipped"] == 1.0
    path = trainer.save_state(tmp_path / "after-nan")
    assert read_manifest(path)["skipped_steps"] == 1 and read_manifest(path)["step"] == 1
    fresh = make_trainer(tiny_dir)
    fresh.load_state(path)
    for a, b in zip(good, fresh.params, strict=True):
        assert torch.equal(a, b)
    assert fresh.skipped_steps == 1
    with torch.no_grad():
        trainer.params[0].view(-1)[0] = float("nan")
    with pytest.raises(CheckpointError, match="NaN"):
        trainer.save_state(tmp_path / "broken")
    assert not (tmp_path / "broken").exists()


def test_writes_are_atomic_and_overwrite_is_explicit(tiny_dir, tmp_path, monkeypatch):
    import tinker_algos.training.checkpoint as ckpt_mod

    trainer = make_trainer(tiny_dir)
    rl_step(trainer)
    path = trainer.save_state(tmp_path / "c")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        trainer.save_state(path)
    rl_step(trainer)
    trainer.save_state(path, overwrite=True)
    assert read_manifest(path)["step"] == 2

    def boom():
        raise RuntimeError("disk full")

    monkeypatch.setattr(ckpt_mod, "get_rng_state", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        trainer.save_state(tmp_path / "d")
    with pytest.raises(RuntimeError, match="disk full"):
        trainer.save_state(path, overwrite=True)
    assert not (tmp_path / "d").exists()
    assert read_manifest(path)["step"] == 2  # the old checkpoint survived the failed overwrite
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no temp dirs left
    with pytest.raises(CheckpointError, match="JSON"):
        save_state(tmp_path / "e", trainer, data_cursor={"x": object()})


def test_kind_mismatches_and_non_checkpoints_fail_clearly(tiny_dir, tmp_path):
    full = make_trainer(tiny_dir)
    rl_step(full)
    full_path = full.save_state(tmp_path / "full")
    lora = make_trainer(tiny_dir, "learner")
    rl_step(lora)
    lora_path = lora.save_state(tmp_path / "lora")
    with pytest.raises(CheckpointError, match="full model weights"):
        load_state(full_path, make_trainer(tiny_dir, "learner"))
    with pytest.raises(CheckpointError, match="holds a LoRA adapter"):
        load_state(lora_path, make_trainer(tiny_dir))
    with pytest.raises(CheckpointError, match="no manifest.json"):
        read_manifest(tmp_path)
    manifest = json.loads((full_path / "manifest.json").read_text())
    manifest["format_version"] = 99
    (full_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="upgrade tinker-algos"):
        read_manifest(full_path)


def test_weights_only_load_and_restore_trainer(tiny_dir, tmp_path):
    trainer = make_trainer(tiny_dir, "learner")
    for _ in range(3):
        rl_step(trainer)
    path = trainer.save_state(tmp_path / "ck")
    weights_only = make_trainer(tiny_dir, "learner")
    weights_only.load_state(path, with_optimizer=False)
    assert weights_only.step == 0 and not weights_only.optimizer.state
    for a, b in zip(trainer.params, weights_only.params, strict=True):
        assert torch.equal(a, b)
    rebuilt, manifest = restore_trainer(path)
    assert rebuilt.adapter == "learner" and rebuilt.step == 3 and manifest["step"] == 3
    assert rebuilt.config == CONFIG and rebuilt.policy.lora_specs["learner"].dropout == 0.1
    for a, b in zip(trainer.params, rebuilt.params, strict=True):
        assert torch.equal(a, b)


def flip_byte(f, offset: int = -100) -> None:
    data = bytearray(f.read_bytes())
    data[offset] ^= 0xFF
    f.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: flip_byte(p / "model" / "model.safetensors"), "model/model.safetensors does not match its SHA-256"),
        (lambda p: (p / "trainer_state.pt").write_bytes((p / "trainer_state.pt").read_bytes()[:50]), "trainer_state.pt has 50 bytes"),
        (lambda p: (p / "rng_state.pt").unlink(), "rng_state.pt is missing"),
        (lambda p: (p / "manifest.json").write_text('{"kind": "opentinker-chec'), "manifest.json is unreadable"),
    ],
    ids=["flipped-byte", "truncated", "missing-file", "torn-manifest"],
)
def test_the_manifest_checksums_catch_a_damaged_checkpoint(tiny_dir, tmp_path, damage, message):
    trainer = make_trainer(tiny_dir)
    rl_step(trainer)
    path = trainer.save_state(tmp_path / "ck")
    files = read_manifest(path)["files"]
    assert {"model/model.safetensors", "trainer_state.pt", "rng_state.pt"} <= files.keys()
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in files.values())
    assert verify(path) is True
    damage(path)
    with pytest.raises(CheckpointError, match=message):
        verify(path)
    with pytest.raises(CheckpointError, match=message):
        load_state(path, make_trainer(tiny_dir))


def test_a_checkpoint_without_checksums_loads_unverified(tiny_dir, tmp_path):
    """Written before manifests listed their files: nothing to check, still loadable."""
    trainer = make_trainer(tiny_dir)
    rl_step(trainer)
    path = trainer.save_state(tmp_path / "old")
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["files"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert verify(path) is False
    fresh = make_trainer(tiny_dir)
    assert load_state(path, fresh)["step"] == 1
    for a, b in zip(trainer.params, fresh.params, strict=True):
        assert torch.equal(a, b)
