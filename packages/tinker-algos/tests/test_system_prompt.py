"""The system prompt chat models see: the job's ``env.system_prompt`` (None: the env spec's, "":
none) in training and held-out evaluation, and math/arithmetic-v0's own, which the tiny preset's
plain-text prompts never show."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

import tinker_algos.algorithms.base as algo_base
import tinker_algos.rollout.episodes as rollout_module
import tinker_core
from tinker_algos import train
from tinker_algos.commands.evaluation import EvalSettings, run_eval
from tinker_algos.model.prompts import PromptRenderer
from tinker_algos.model.tokenizer import build_char_tokenizer, load_tokenizer
from tinker_core.config import EnvConfig, JobConfig

IM_START = "<|im_start|>"


@pytest.fixture(scope="module")
def tok(smollm2_dir: Path) -> Any:
    return load_tokenizer(smollm2_dir)


def _system_of(tok: Any, ids: list[int]) -> str | None:
    """The system message's text in a ChatML prompt (None without one)."""
    text = tok.decode(ids)
    head = f"{IM_START}system\n"
    if not text.startswith(head):
        return None
    return text[len(head) : text.index("<|im_end|>")]


def test_env_config_system_prompt_defaults_to_the_env_spec() -> None:
    assert EnvConfig(id="math/arithmetic-v0").system_prompt is None
    assert EnvConfig(id="math/arithmetic-v0", system_prompt="").system_prompt == ""
    assert EnvConfig(id="math/arithmetic-v0", system_prompt="Be brief.").system_prompt == "Be brief."


def test_arithmetic_ships_a_system_prompt_that_reaches_a_chat_model(tok) -> None:
    env = tinker_core.make_env("math/arithmetic-v0")
    spec_prompt = env.env_spec.system_prompt
    assert spec_prompt  # a default for chat models
    obs, _ = env.reset(seed=0)
    renderer = PromptRenderer.from_config(tok, "auto")
    assert _system_of(tok, renderer.start(obs, spec_prompt)[0]) == spec_prompt
    # the job's env.system_prompt replaces it; "" removes it (SmolLM2's template then adds its own default)
    assert _system_of(tok, renderer.with_system_prompt("Reply in digits.").start(obs, spec_prompt)[0]) == "Reply in digits."
    none = renderer.with_system_prompt("").start(obs, spec_prompt)[0]
    assert spec_prompt not in tok.decode(none) and tok.decode(none).endswith(f"{obs}<|im_end|>\n{IM_START}assistant\n")
    assert renderer.with_system_prompt(None) is renderer


def test_the_tiny_preset_renders_arithmetic_prompts_byte_identically_with_any_system_prompt() -> None:
    """examples/arithmetic.yaml's results do not move: the tiny model's prompts stay plain text."""
    char = build_char_tokenizer()
    env = tinker_core.make_env("math/arithmetic-v0", digits=2, ops="+")
    auto = PromptRenderer.from_config(char, "auto")
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        plain = char.encode(obs, add_special_tokens=True)
        assert auto.start(obs, env.env_spec.system_prompt)[0] == plain
        assert auto.with_system_prompt("Answer with the number only.").start(obs, env.env_spec.system_prompt)[0] == plain


def test_held_out_eval_uses_the_jobs_system_prompt(tok, monkeypatch) -> None:
    seen: dict[str, Any] = {}

    def fake_rollout(policy, factory, seeds, params, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr(rollout_module, "rollout", fake_rollout)
    policy = types.SimpleNamespace(tokenizer=tok)
    env = EnvConfig(id="math/arithmetic-v0", system_prompt="Digits only.")
    with pytest.raises(RuntimeError, match="stop here"):
        run_eval(policy, EvalSettings(env=env, n=1))  # type: ignore[arg-type]
    assert seen["renderer"].chat and seen["renderer"].system_prompt == "Digits only."
    seen.clear()
    with pytest.raises(RuntimeError, match="stop here"):
        run_eval(policy, EvalSettings(env=EnvConfig(id="math/arithmetic-v0"), n=1))  # type: ignore[arg-type]
    assert "renderer" not in seen  # the rollout's default: the env spec's system prompt


def test_training_and_its_evaluation_render_with_the_jobs_system_prompt(tmp_path, monkeypatch) -> None:
    """A job's ``env.system_prompt`` reaches the stage's renderer, which rollouts and evaluation use."""
    seen: list[Any] = []
    real = algo_base.StageContext.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        seen.append(self.renderer)

    monkeypatch.setattr(algo_base.StageContext, "__init__", spy)
    job = JobConfig.model_validate({
        "name": "sp",
        "model": {"name": "tiny"},
        "env": {"id": "math/arithmetic-v0", "kwargs": {"digits": 1}, "system_prompt": "Digits only."},
        "stages": [{"name": "g", "algorithm": {"name": "grpo", "steps": 1, "eval_size": 2}}],
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 2},
    })
    train(job, run_dir=tmp_path / "run")
    assert [r.system_prompt for r in seen] == ["Digits only."]
