"""Every job config under examples/ validates (with the installed plugins), and so does every
compare file there (``compare-*.yaml``: each variant's config), and the SmolLM2 example trains a LoRA adapter with GRPO through the chat template with its system prompt.

An example whose env comes from an ecosystem adapter (``reasoning_gym/...``, ``textarena/...``)
needs ``tinker-env-adapters`` and that ecosystem's package, which this package's test env does
not install; those are validated by ``integration-tests/test_examples.py``, where every package is.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from tinker_core.config import load_config, parse_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
JOB_EXAMPLES = sorted(p for p in EXAMPLES.glob("*.yaml") if not p.name.startswith("compare-"))
ADAPTER_NAMESPACES = ("reasoning_gym/", "textarena/", "gym/", "openenv/", "verifiers/", "skyrl/")


def needs_adapters(path: Path) -> bool:
    env = (yaml.safe_load(path.read_text()) or {}).get("env") or {}
    return str(env.get("id", "")).startswith(ADAPTER_NAMESPACES)


@pytest.mark.parametrize("path", JOB_EXAMPLES, ids=lambda p: p.name)
def test_example_config_validates(path: Path) -> None:
    if needs_adapters(path) and importlib.util.find_spec("tinker_env_adapters") is None:
        pytest.skip("its env comes from tinker-env-adapters; validated in integration-tests/test_examples.py")
    job = load_config(path)
    assert job.resolved_stages()


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("compare-*.yaml")), ids=lambda p: p.name)
def test_example_compare_file_validates(path: Path) -> None:
    from tinker_algos.compare.spec import load_spec

    spec = load_spec(path)
    # one variant is a compare too: its report gives each metric's gain over the warm start
    assert spec.variants and spec.seeds
    assert spec.baseline is None or spec.baseline in {v.name for v in spec.variants}


def test_the_smollm2_example_is_lora_grpo_through_the_chat_template() -> None:
    job = load_config(EXAMPLES / "smollm2-arithmetic.yaml")
    (stage,) = job.resolved_stages()
    assert job.model.name == "smollm2-135m-instruct" and job.model.chat_template == "auto"
    assert job.lora is not None and stage.algorithm.name == "grpo"
    assert stage.env is not None and stage.env.id == "math/arithmetic-v0" and stage.env.system_prompt
    assert stage.env.eval_kwargs is not None and stage.env.eval_kwargs["split"] == "test"
    assert 0 < stage.algorithm.eval_every < stage.algorithm.steps and job.checkpoint.every > 0
    assert stage.rollout is not None and stage.rollout.stop == []  # chat models stop at <|im_end|>


def test_the_3term_calculator_compare_keeps_its_warm_start_in_step_with_the_recipe() -> None:
    """The compare's sft-only variant is the recipe's first stage alone, and the other variants
    differ from the recipe only in dynamic sampling (so the report compares what it says)."""
    from tinker_algos.compare.spec import expand, load_spec

    recipe = load_config(EXAMPLES / "smollm2-calculator-3terms.yaml")
    sft, grpo = recipe.resolved_stages()
    assert (sft.algorithm.name, grpo.algorithm.name) == ("sft", "grpo") and recipe.rollout.dynamic_sampling.enabled
    jobs = {(j.variant, j.seed): parse_config(j.config) for j in expand(load_spec(EXAMPLES / "compare-calculator-3terms.yaml"))}
    assert sorted({s for _, s in jobs}) == [0, 1, 2]  # seed 100 tuned the recipe
    (only,) = jobs["sft-only", 0].resolved_stages()
    assert only.algorithm == sft.algorithm and only.optimizer == sft.optimizer
    assert jobs["grpo-dynamic-sampling", 0].stages == recipe.stages
    assert not jobs["grpo", 0].rollout.dynamic_sampling.enabled and jobs["grpo", 0].stages == recipe.stages

