"""``multi_agent.mode: learners``: one LoRA adapter, optimizer and policy update per role.

Every role of the env is played by its own adapter on the stage's policy (the shared base model),
named :func:`~tinker_algos.multiagent.params.role_adapter` (``<job adapter>-<role>``), created with
the job's ``lora`` settings and starting from the job adapter's weights as the stage finds them (so
a warm start, e.g. an SFT stage before this one, carries over to every role). Each role has its own :class:`~tinker_algos.training.trainer.Trainer` (its own
optimizer and LR schedule; ``roles.<role>.optimizer``, ``.optimizer_params`` and ``.lr`` replace
the stage's) and its own
:class:`~tinker_algos.algorithms.update.PolicyUpdate` (``roles.<role>.loss`` and ``loss_config``
replace the stage's). A step's episodes are played by all the adapters together; then each role
learns from :meth:`MultiAgentRolloutResult.for_role` -- its own trajectories only -- with its own
trainer, which activates its adapter (the only trainable one) for every call. So an adapter's
weights move only with its own role's tokens.

Checkpoints: each role's trainer state is written as a trainer checkpoint under
``checkpoints/step-N/roles/<role>/`` (adapter, optimizer, RNG; covered by the run checkpoint's
manifest), which ``opentinker eval`` and ``opentinker export`` read like any checkpoint. A resumed
run loads them back (with the optimizer mid-stage, the weights alone at a stage boundary).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tinker_algos.algorithms.base import StageContext
from tinker_algos.algorithms.update import PolicyUpdate
from tinker_algos.multiagent.params import MultiAgentParams, role_adapter
from tinker_algos.multiagent.results import MultiAgentRolloutResult
from tinker_algos.records.health import TiedRewardsHint
from tinker_algos.training.checkpoint import load_state, save_state
from tinker_algos.training.trainer import Trainer
from tinker_algos.training.trainer_config import TrainerConfig
from tinker_core.config import RoleLearnerConfig
from tinker_core.errors import ConfigError
from tinker_core.seeding import derive_seed

__all__ = ["ROLES_DIR", "RoleLearner", "RoleLearners"]

ROLES_DIR = "roles"
"""The folder of a run checkpoint holding one trainer checkpoint per role (``roles/<role>/``)."""


@dataclasses.dataclass
class RoleLearner:
    """One role's learner: its adapter, trainer and policy update (with a context whose
    ``trainer`` and ``adapter`` are the role's)."""

    role: str
    adapter: str
    trainer: Trainer
    update: PolicyUpdate
    hint: TiedRewardsHint
    """Says once when this role's groups tied for a few steps in a row (its own count)."""

    @property
    def ctx(self) -> StageContext:
        return self.update.ctx


class RoleLearners:
    """The learners of every role of a stage in ``learners`` mode (see the module docstring).

    Args:
        ctx: the stage's context (its ``adapter`` is the job's; the role adapters are named after it).
        settings: the checked ``multi_agent`` settings (``settings.roles`` has every role).
        algorithm / default_loss: as for :class:`PolicyUpdate` (``"grpo"``, ``"importance_sampling"``).
    """

    def __init__(self, ctx: StageContext, settings: MultiAgentParams, algorithm: str, default_loss: str) -> None:
        assert ctx.adapter is not None, "learners mode trains LoRA adapters (checked by MultiAgentParams.for_env)"
        lora = ctx.policy.lora_specs.get(ctx.adapter)
        self.by_role: dict[str, RoleLearner] = {}
        for role, own in settings.roles.items():
            adapter = role_adapter(ctx.adapter, role)
            config = role_trainer_config(ctx.trainer.config, own)
            trainer = Trainer(ctx.policy, config, adapter=adapter, lora=lora, adapter_seed=derive_seed(ctx.job.seed, "role", role))
            # every role starts from the job's adapter as the stage finds it: a warm start (an SFT
            # stage before this one) carries over to each learner
            ctx.policy.copy_adapter_weights(ctx.adapter, adapter)
            algo = ctx.algo.model_copy(update={
                "loss": own.loss if own.loss is not None else ctx.algo.loss,
                "loss_config": own.loss_config if own.loss_config is not None else ctx.algo.loss_config,
            })
            role_ctx = dataclasses.replace(ctx, trainer=trainer, adapter=adapter, stage=ctx.stage.model_copy(update={"algorithm": algo}))
            try:
                update = PolicyUpdate(role_ctx, algorithm, default_loss, behaviour="sampler")
            except ConfigError as e:  # the role's own loss or loss_config: name the role's field
                own_field = f"{ctx.where}.params.multi_agent.roles.{role}."
                raise ConfigError([p.replace(f"{ctx.where}.loss", own_field + "loss", 1) for p in e.problems]) from None
            update.start()
            self.by_role[role] = RoleLearner(role, adapter, trainer, update, TiedRewardsHint(lambda line, r=role: ctx.log(f"role {r}: {line}")))
        ctx.policy.set_adapter(ctx.adapter)  # the stage's own adapter active again, as before

    def __iter__(self) -> Iterator[RoleLearner]:
        return iter(self.by_role.values())

    @property
    def adapters(self) -> dict[str, str]:
        """``{role: adapter name}``."""
        return {r: lr.adapter for r, lr in self.by_role.items()}

    def learn(
        self,
        result: MultiAgentRolloutResult,
        learn_one: Callable[[MultiAgentRolloutResult, PolicyUpdate, TiedRewardsHint], dict[str, float]],
    ) -> dict[str, float]:
        """Each role learns from its own trajectories (``learn_one(result.for_role(role), update,
        hint)`` returns its metrics); returns them as ``roles/<role>/<key>``, plus each key every role
        logged as the mean over the roles (so ``losses/policy`` and ``optim/grad_norm`` read as
        in the other modes)."""
        per_role = {r: learn_one(result.for_role(r), lr.update, lr.hint) for r, lr in self.by_role.items()}
        out = {f"roles/{r}/{k}": v for r, m in per_role.items() for k, v in m.items()}
        shared = set.intersection(*(set(m) for m in per_role.values())) if per_role else set()
        for k in sorted(shared):
            out[k] = sum(m[k] for m in per_role.values()) / len(per_role)
        return out

    # ---- checkpoints ------------------------------------------------------------------------------
    def save(self, checkpoint_dir: Path) -> None:
        """Each role's trainer checkpoint in ``checkpoint_dir/roles/<role>/``."""
        for r, lr in self.by_role.items():
            save_state(checkpoint_dir / ROLES_DIR / r, lr.trainer)

    def load(self, checkpoint_dir: Path, *, with_optimizer: bool) -> None:
        """Restore what :meth:`save` wrote (the run already checked the files); a checkpoint with
        no ``roles/`` (the end of a stage in another mode) leaves the adapters as they are."""
        for r, lr in self.by_role.items():
            path = checkpoint_dir / ROLES_DIR / r
            if path.is_dir():
                load_state(path, lr.trainer, with_optimizer=with_optimizer, check=False)
            elif with_optimizer:
                raise FileNotFoundError(f"checkpoint {checkpoint_dir} has no {ROLES_DIR}/{r}/: it was not written in learners mode")

    def state_dict(self) -> dict[str, Any]:
        """The updates' own state (the reference policies) by role."""
        return {r: lr.update.state_dict() for r, lr in self.by_role.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for r, lr in self.by_role.items():
            lr.update.load_state_dict(state.get(r, {}))


def role_trainer_config(stage: TrainerConfig, own: RoleLearnerConfig) -> TrainerConfig:
    """The stage's trainer config with a role's own optimizer, its settings and lr: a role that
    names another optimizer starts from no settings (``betas`` mean nothing to ``sgd``)."""
    optimizer = own.optimizer if own.optimizer is not None else stage.optimizer
    if own.optimizer_params is not None:
        settings = dict(own.optimizer_params)
    else:
        settings = dict(stage.optimizer_config) if optimizer == stage.optimizer else {}
    return dataclasses.replace(
        stage, optimizer=optimizer, optimizer_config=settings, lr=own.lr if own.lr is not None else stage.lr
    )
