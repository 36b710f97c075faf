"""Pieces several algorithms share, so that each algorithm file reads top to bottom on its own.

* :class:`ReferencePolicy` -- log-probabilities under the stage's starting policy (KL penalties,
  DPO's implicit reward).
* :func:`kl_to_reference` -- the KL penalty to it: its mean, and the token rewards shaped by it.
* :func:`resolve_estimator`, :func:`check_estimator_config`, :func:`resolve_loss` -- fail on a
  wrong name, kind or key before any work.
* :func:`shuffled_batch`, :func:`example_trajectory`,
  :func:`stage_system_prompt` -- offline data (SFT examples, DPO pairs; read by
  :mod:`tinker_algos.hub.data_sources`): cycled through in per-epoch shuffled order, tokenized through the chat template like rollouts.

Algorithms import these from here, never from each other.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

import tinker_core
import tinker_core.registry
from tinker_algos.algorithms.base import StageContext
from tinker_algos.builtins.kl import kl_estimate
from tinker_core.config import KLConfig
from tinker_core.contracts import AdvantageInputs, Batch, LossInputs, Trajectory
from tinker_core.errors import ConfigError
from tinker_core.seeding import derive_seed

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from tinker_algos.model.prompts import PromptRenderer
    from tinker_core.contracts import AdvantageEstimator, LossKind

_T = TypeVar("_T")


class ReferencePolicy:
    """Log-probabilities under the reference policy: the stage's starting weights.

    LoRA: a copy of the stage's adapter as the stage starts (after an SFT stage: the SFT result;
    a fresh adapter leaves the base model's outputs unchanged), swapped into the adapter for each
    reference pass and back out after it. Full fine-tuning: a frozen copy of the whole model.
    Either way, build it once the stage's starting weights are in place; the copy travels in the
    checkpoint (:meth:`state_dict`), so a resumed stage keeps its reference.
    """

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.module: torch.nn.Module | None = None
        self.adapter: dict[str, torch.Tensor] = {}
        if ctx.adapter is None:
            self.module = copy.deepcopy(ctx.policy.module).eval()
            for p in self.module.parameters():
                p.requires_grad_(False)
        else:
            self.adapter = {n: p.detach().clone() for n, p in ctx.policy.trainable_parameters(ctx.adapter)}

    def logprobs(self, batch: Batch) -> np.ndarray:
        if self.module is None:
            return self._adapter_logprobs(batch)
        import torch

        from tinker_algos.training.shared_prefix import batch_logprobs

        dev = self.ctx.policy.device
        tokens = torch.as_tensor(batch.tokens_B_T, device=dev)
        attn = torch.as_tensor(batch.attention_mask_B_T, device=dev)
        trained = torch.as_tensor(batch.loss_mask_B_T, device=dev) * attn
        with torch.no_grad():  # the pass Trainer.forward runs, so that equal weights give equal logprobs
            config = self.ctx.trainer.config
            lp = batch_logprobs(self.module, tokens, attn, trained, spec=self.ctx.policy.spec, share=config.share_prefix, chunked=config.chunked_logprobs)
        return (lp.float() * attn).cpu().numpy()

    def _adapter_logprobs(self, batch: Batch) -> np.ndarray:
        """The trainer's own pass with the starting adapter weights in place of the current ones."""
        import torch

        assert self.ctx.adapter is not None
        params = dict(self.ctx.policy.trainable_parameters(self.ctx.adapter))
        with torch.no_grad():
            current = {n: p.detach().clone() for n, p in params.items()}
            for n, p in params.items():
                p.copy_(self.adapter[n])
            try:
                return self.ctx.trainer.forward(batch)
            finally:
                for n, p in params.items():
                    p.copy_(current[n])

    def state_dict(self) -> dict[str, Any]:
        if self.module is not None:
            return {"reference": self.module.state_dict()}
        return {"reference_adapter": dict(self.adapter)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.module is not None and "reference" in state:
            self.module.load_state_dict(state["reference"])
        if self.module is None and "reference_adapter" in state:
            saved = state["reference_adapter"]
            if saved.keys() != self.adapter.keys():
                raise ValueError(f"the checkpoint's reference adapter does not match adapter {self.ctx.adapter!r} (LoRA rank or target modules changed?)")
            self.adapter = {n: t.to(self.adapter[n].device, self.adapter[n].dtype) for n, t in saved.items()}


def kl_to_reference(
    logprobs_B_T: np.ndarray, ref_logprobs_B_T: np.ndarray, batch: Batch, mask_B_T: np.ndarray, kl: KLConfig
) -> tuple[float, np.ndarray | None]:
    """``(kl/policy_ref, token_rewards_B_T)``: the mean KL estimate over the trained tokens, and
    with ``kl.mode == "reward"`` the episode rewards on their last token minus ``coef * KL``
    per token (None in ``loss`` mode: the KL is then a loss term)."""
    k_B_T = kl_estimate(logprobs_B_T, ref_logprobs_B_T, kl.estimator) * mask_B_T
    mean = float(k_B_T.sum() / max(float(mask_B_T.sum()), 1.0))
    if kl.mode != "reward":
        return mean, None
    rewards_B_T = AdvantageInputs(batch.rewards_B, mask_B_T, batch.group_ids_B).token_rewards()
    return mean, rewards_B_T - kl.coef * k_B_T


def resolve_estimator(ctx: StageContext, default: str, *, critic: bool) -> tuple[str, AdvantageEstimator]:
    """``(name, function)`` of the stage's advantage estimator; it must use a critic iff ``critic``."""
    name = ctx.algo.estimator or default
    entry = tinker_core.registry.get_advantage_estimator(name)
    if entry.needs_critic != critic:
        if critic:
            problem = f"ppo trains a critic for an estimator that uses one (gae); {name!r} needs none, so use algorithm 'grpo' with loss 'ppo' for it"
        else:
            problem = f"{name!r} needs a critic; use algorithm 'ppo' for it, or a group estimator (grpo, dr_grpo, rloo, reinforce_pp_baseline)"
        raise ConfigError([f"{ctx.where}.estimator: {problem}"])
    return name, entry.obj


def check_estimator_config(ctx: StageContext, estimator: AdvantageEstimator, inputs: AdvantageInputs, config: dict[str, Any]) -> None:
    """Call ``estimator`` once on ``inputs`` with ``config`` (the stage's
    ``params.estimator_config``): a key it does not take (or a bad value) is a config error
    naming ``estimator_config`` before any work, not after the first rollout."""
    try:
        estimator(inputs, **config)
    except (TypeError, ValueError) as e:
        raise ConfigError([f"{ctx.where}.params.estimator_config: {e}"]) from None


def resolve_loss(ctx: StageContext, algorithm: str, default: str, kind: LossKind) -> str:
    """The stage's loss name (``algorithm.loss``, else ``default``), checked before any work: it
    is registered (did-you-mean), of ``kind`` (``policy`` for GRPO and PPO, ``preference`` for
    DPO), and takes the stage's ``loss_config`` (the loss runs once on a one-token probe; a key it
    does not take, or a bad value, is a config error naming ``loss_config``)."""
    import torch

    name = ctx.algo.loss or default
    entry = tinker_core.registry.get_loss(name)
    if entry.loss_kind != kind:
        names = ", ".join(e.name for e in tinker_core.registry.get_registry("losses").entries() if e.loss_kind == kind)
        raise ConfigError([f"{ctx.where}.loss: {algorithm} needs a {kind} loss ({names}), got {name!r} ({entry.loss_kind})"])
    lp = torch.zeros(1, 1)
    z = torch.zeros(2, 1)
    probe = {
        "policy": LossInputs(lp, torch.ones(1, 1), sampling_logprobs_B_T=lp, advantages_B_T=lp),
        "preference": LossInputs(z, torch.ones(2, 1), ref_logprobs_B_T=z),
    }[kind]
    try:
        entry.obj(probe, **ctx.algo.loss_config)
    except (TypeError, ValueError) as e:
        raise ConfigError([f"{ctx.where}.loss_config: {e}"]) from None
    return name


def shuffled_batch(ctx: StageContext, items: Sequence[_T], step: int) -> list[_T]:
    """Step ``step``'s ``batch_size`` items: the next slice of a per-epoch shuffled order.

    The order of epoch ``e`` is seeded from ``(seed, stage, "epoch", e)``, so resume needs only
    the step.
    """
    bs, n = ctx.algo.batch_size, len(items)
    out = []
    for k in range(step * bs, (step + 1) * bs):
        epoch, i = divmod(k, n)
        order = np.random.default_rng(derive_seed(ctx.job.seed, ctx.stage_index, "epoch", epoch)).permutation(n)
        out.append(items[int(order[i])])
    return out


def example_trajectory(
    tokenizer: PreTrainedTokenizerBase, prompt: str, completion: str, renderer: PromptRenderer | None = None, system_prompt: str = ""
) -> Trajectory:
    """A trajectory that trains on ``completion`` only, tokenized as the sampler later sees and
    produces it: the prompt through ``renderer`` (a :class:`tinker_algos.model.prompts.PromptRenderer`:
    the chat template with ``system_prompt`` and the generation prompt for a chat model, plain text
    with ``<bos>`` otherwise), the completion without special tokens, ending with the template's
    end-of-turn token for a chat model (so the model learns to end its turn, as the sampler stops
    there). ``renderer=None`` is plain text (the prompt with the tokenizer's special tokens)."""
    if renderer is None:
        prompt_ids = list(tokenizer.encode(prompt, add_special_tokens=True))
    else:
        prompt_ids, _ = renderer.start(prompt, system_prompt)
    completion_ids = list(tokenizer.encode(completion, add_special_tokens=False))
    if renderer is not None and renderer.chat and renderer.end_of_turn_id is not None:
        completion_ids.append(int(renderer.end_of_turn_id))
    tokens = [*prompt_ids, *completion_ids]
    mask = [0.0] * len(prompt_ids) + [1.0] * len(completion_ids)
    return Trajectory(tokens, [0.0] * len(tokens), mask, [0.0])


def stage_system_prompt(ctx: StageContext, env: object = None) -> str:
    """The env spec's system prompt for offline examples of the stage: that of ``env`` (an env
    instance) or of the stage's env id; ``""`` without one (the job's ``env.system_prompt``, which
    the stage's renderer carries, overrides it in :meth:`PromptRenderer.start`)."""
    spec = getattr(env, "env_spec", None)
    if spec is None and ctx.stage.env is not None and not ctx.stage.env.address:
        try:
            spec = tinker_core.registry.env_spec(ctx.stage.env.id)
        except Exception:  # an id only a remote server knows: no system prompt
            spec = None
    return getattr(spec, "system_prompt", "") or ""
