"""PPO: the critic's value alignment and state, config errors, learning after an SFT warm start, exact resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tinker_algos import train
from tinker_algos.algorithms.critic import Critic, decoder_of, explained_variance
from tinker_algos.model.models import PolicyModel, sequence_logprobs
from tinker_algos.records.metrics import read_metrics
from tinker_core.errors import ConfigError

pytest.importorskip("tinker_env_math", reason="PPO's learning tests run on math/arithmetic-v0 from tinker-env-math")

ENV = {"id": "math/arithmetic-v0", "kwargs": {"digits": 1, "ops": ["+"]}, "eval_kwargs": {"digits": 1, "ops": ["+"], "split": "all"}}
SFT_STEPS, PPO_STEPS = 60, 12


pytestmark = pytest.mark.usefixtures("algos_and_math_plugins")


def no_files(**over: Any) -> dict[str, Any]:
    return {"logging": {"tensorboard": False, "plot": False}, **over}


# ---- the critic ---------------------------------------------------------------------------------


def _randomise(critic: Critic, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        critic.head.linear.weight.copy_(torch.randn(critic.head.linear.weight.shape, generator=g))
        critic.head.linear.bias.fill_(0.25)


def test_values_use_the_logprob_alignment(policy: PolicyModel, batch_factory: Any) -> None:
    """V[:, t] is read at t - 1: it sees tokens < t only; 0 at position 0 and on padding."""
    tok = policy.tokenizer
    batch = batch_factory(tok, ["3+4=", "12+30="], ["7\n", "42\n"])
    critic = Critic(policy, mode="head")
    _randomise(critic)
    v = critic.values(batch)
    attn = batch.attention_mask_B_T
    assert v.shape == batch.tokens_B_T.shape
    assert np.all(v[:, 0] == 0) and np.all(v[attn == 0] == 0)
    with torch.no_grad():
        body = decoder_of(policy.module)
        h = body(input_ids=torch.as_tensor(batch.tokens_B_T), attention_mask=torch.as_tensor(attn).long()).last_hidden_state
        manual = critic.head(h).numpy()
    n0 = int(attn[0].sum())
    np.testing.assert_allclose(v[0, 1:n0], manual[0, : n0 - 1], rtol=1e-5, atol=1e-6)
    # changing token t leaves V[:, <= t] alone and moves V[:, t + 1]
    t = 3
    changed = batch_factory(tok, ["3+5=", "12+30="], ["7\n", "42\n"])
    assert changed.tokens_B_T[0, t] != batch.tokens_B_T[0, t] and np.all(changed.tokens_B_T[0, :t] == batch.tokens_B_T[0, :t])
    v2 = critic.values(changed)
    np.testing.assert_array_equal(v2[0, : t + 1], v[0, : t + 1])
    assert v2[0, t + 1] != v[0, t + 1]


def test_separate_critic_starts_as_a_copy_and_trains_only_itself(policy: PolicyModel, batch_factory: Any) -> None:
    batch = batch_factory(policy.tokenizer, ["3+4=", "5+1="], ["7\n", "6\n"])
    shared, separate = Critic(policy, mode="head"), Critic(policy, mode="separate")
    _randomise(shared)
    _randomise(separate)
    np.testing.assert_allclose(shared.values(batch), separate.values(batch), rtol=1e-5, atol=1e-6)
    mask = batch.loss_mask_B_T
    returns = mask * 1.0
    before = [p.detach().clone() for p in policy.module.parameters()]
    separate.forward_backward(batch, returns, separate.values(batch), clip_eps=None)
    assert all(p.grad is None for p in policy.module.parameters())  # the policy never sees it
    m = separate.optim_step(lr=1e-2)
    assert m["grad_norm"] > 0 and separate.updates == 1
    assert all(torch.equal(a, b) for a, b in zip(before, policy.module.parameters(), strict=True))
    # the state round-trips exactly into a fresh critic
    clone = Critic(policy, mode="separate")
    clone.load_state_dict(separate.state_dict())
    np.testing.assert_array_equal(clone.values(batch), separate.values(batch))
    assert clone.optimizer.state_dict()["state"].keys() == separate.optimizer.state_dict()["state"].keys()
    with pytest.raises(ValueError, match="resume with the same algorithm.params.critic"):
        shared.load_state_dict(separate.state_dict())


@pytest.mark.parametrize("detach", [False, True])
def test_the_head_shares_the_policy_body_unless_detached(policy: PolicyModel, batch_factory: Any, detach: bool) -> None:
    batch = batch_factory(policy.tokenizer, ["3+4="], ["7\n"])
    critic = Critic(policy, mode="head", detach=detach)
    _randomise(critic)
    critic.forward_backward(batch, batch.loss_mask_B_T * 1.0, critic.values(batch), clip_eps=None)
    body_grads = [p.grad for p in decoder_of(policy.module).parameters()]
    assert critic.head.linear.weight.grad is not None
    assert all(g is None for g in body_grads) if detach else any(g is not None and g.abs().sum() > 0 for g in body_grads)


def test_explained_variance() -> None:
    m = np.array([[1, 1, 0], [1, 1, 1]])
    ret = np.array([[1.0, 2.0, 9.0], [3.0, 4.0, 5.0]])
    assert explained_variance(ret, ret, m) == 1.0
    assert explained_variance(np.zeros_like(ret) + 3.0, ret, m) == pytest.approx(0.0)
    assert explained_variance(np.zeros_like(ret), np.ones_like(ret), m) == 0.0  # constant returns
    assert explained_variance(-ret, ret, m) < 0


# ---- config errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"estimator": "grpo"}, r"algorithm.estimator: .*use algorithm 'grpo'"),
        ({"loss": "dpo"}, r"algorithm.loss: ppo needs a policy loss"),
        ({"params": {"critic": "shared"}}, r"algorithm.params.critic: Input should be 'head' or 'separate'"),
        ({"params": {"vf_coeff": 0.5}}, r"algorithm.params.vf_coeff: unknown key; did you mean 'vf_coef'"),
        ({"params": {"vf_coef": -1}}, r"algorithm.params.vf_coef: Input should be greater than or equal to 0"),
        ({"params": {"estimator_config": {"gama": 0.9}}}, r"estimator_config: .*'gama'"),
        ({"loss_config": {"eps": 0.2}}, r"algorithm.loss_config: .*'eps'"),
    ],
)
def test_bad_ppo_options_are_config_errors(tmp_path: Path, over: dict[str, Any], match: str) -> None:
    cfg = {"model": {"name": "tiny"}, "env": ENV, "algorithm": {"name": "ppo", "steps": 1, **over}, **no_files()}
    with pytest.raises(ConfigError, match=match):
        train(cfg, run_dir=tmp_path)


# ---- learning -----------------------------------------------------------------------------------


def gold_probability(model_dir: Path) -> float:
    """Mean probability of the exact gold completion over all 100 one-digit sums (= the expected
    reward of sampling at temperature 1, up to other spellings of the same number)."""
    from tinker_algos.algorithms.common import example_trajectory
    from tinker_core.contracts import Batch
    from tinker_env_math.arithmetic import arithmetic_problems

    policy = PolicyModel.load(model_dir, device="cpu", precision="fp32")
    problems = arithmetic_problems(100, 0, digits=1, ops="+", split="all")
    batch = Batch.from_trajectories([example_trajectory(policy.tokenizer, p.prompt, p.target) for p in problems], policy.pad_token_id)
    with torch.no_grad():
        lp = sequence_logprobs(policy.module, torch.as_tensor(batch.tokens_B_T), torch.as_tensor(batch.attention_mask_B_T)).numpy()
    return float(np.exp((lp * batch.loss_mask_B_T).sum(-1)).mean())


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """SFT warm start (deliberately short) then PPO, as one two-stage job."""
    run = tmp_path_factory.mktemp("ppo-warm")
    cfg = {
        "name": "sft-then-ppo",
        "seed": 0,
        "model": {"name": "tiny"},
        "env": ENV,
        "stages": [
            {"name": "sft", "algorithm": {"name": "sft", "steps": SFT_STEPS, "batch_size": 32, "eval_size": 200}, "optimizer": {"lr": 1e-3}},
            {
                "name": "ppo",
                "algorithm": {"name": "ppo", "steps": PPO_STEPS, "eval_size": 200, "epochs_per_step": 4, "micro_batch_size": 32, "params": {"critic_lr": 1e-3}},
                "optimizer": {"lr": 1e-4, "warmup_steps": 3},
                "rollout": {"prompts_per_step": 16, "group_size": 4, "max_new_tokens": 4},
            },
        ],
        "rollout": {"max_new_tokens": 4},
        **no_files(),
    }
    return run, train(cfg, run_dir=run)


def test_ppo_after_an_sft_warm_start_raises_the_expected_reward(warm_run: tuple[Path, Any]) -> None:
    run, result = warm_run
    assert result.status == "completed" and result.step == SFT_STEPS + PPO_STEPS
    rows = read_metrics(run / "metrics.jsonl")
    ppo = [r for r in rows if r["stage"] == "ppo"]
    for key in ("losses/policy", "losses/value", "losses/clipfrac", "losses/approx_kl", "values/explained_variance", "kl/sample_train", "env/reward_mean"):
        assert all(np.isfinite(r[key]) for r in ppo), key
    assert all(r["optim/updates"] == 8 for r in ppo)  # 4 epochs x 64 episodes / 32
    assert max(r["losses/clipfrac"] for r in ppo) > 0  # later minibatches are off-policy and clip
    assert all(abs(r["kl/sample_train"]) < 1e-4 for r in ppo)
    ckpt = run / "checkpoints"
    before = gold_probability(ckpt / f"step-{SFT_STEPS:06d}" / "trainer" / "model")
    after = gold_probability(ckpt / f"step-{SFT_STEPS + PPO_STEPS:06d}" / "trainer" / "model")
    assert after > before + 0.03, (before, after)
    sft_eval = [r["eval/accuracy"] for r in rows if r["stage"] == "sft" and "eval/accuracy" in r][-1]
    assert result.eval["eval/accuracy"] >= sft_eval, (sft_eval, result.eval)


# ---- exact resume -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("critic", "kl", "lora"),
    [("head", {"coef": 0.05, "mode": "loss"}, None), ("separate", {"coef": 0.05, "mode": "reward"}, {"rank": 4})],
    ids=["head-full-ft", "separate-lora"],
)
def test_resume_with_the_critic_is_bit_identical(
    tmp_path: Path,
    warm_run: tuple[Path, Any],
    critic: str,
    kl: dict[str, Any],
    lora: dict[str, Any] | None,
    stop_after: Any,
    deterministic_metrics: Any,
) -> None:
    start = warm_run[0] / "checkpoints" / f"step-{SFT_STEPS:06d}" / "trainer" / "model"
    cfg = {
        "seed": 3,
        "model": {"name": str(start)},
        "env": ENV,
        "algorithm": {
            "name": "ppo", "steps": 4, "eval_size": 8, "epochs_per_step": 2, "micro_batch_size": 8, "kl": kl,
            "params": {"critic": critic, "critic_lr": 1e-3, "vf_coef": 0.5},
        },
        "rollout": {"prompts_per_step": 8, "group_size": 2, "max_new_tokens": 4},
        "optimizer": {"lr": 1e-4},
        **no_files(),
        **({"lora": lora} if lora else {}),
    }
    whole = train(cfg, run_dir=tmp_path / "whole")
    first = train(cfg, run_dir=tmp_path / "split", callbacks=stop_after(2))
    assert first.status == "interrupted" and first.step == 2
    second = train(cfg, run_dir=tmp_path / "split")
    assert whole.status == second.status == "completed" and second.step == 4

    a, b = deterministic_metrics(tmp_path / "whole"), deterministic_metrics(tmp_path / "split")
    assert a == b
    assert any(r["losses/value"] > 0 for r in a) and any(r["env/reward_mean"] > 0 for r in a)
    assert all(r["optim/updates"] == 4 for r in a)
