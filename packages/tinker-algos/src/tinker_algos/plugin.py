"""tinker-algos' built-in algorithm plugins, registered through the public ``opentinker`` hooks.

This module is the ``algos`` entry point in the ``opentinker`` group: the built-ins are
registered exactly as a third-party plugin would register its own. It stays light:

* advantage estimators (numpy only) are imported inside the hook and registered directly;
* losses and optimizers need torch, so they are registered as :class:`Deferred` callables that
  import :mod:`tinker_algos.builtins.losses` / :mod:`tinker_algos.builtins.optimizers` on their first call.
  Listing plugins or looking a name up never imports torch.

Registered names:

* advantage estimators: ``gae`` (needs a critic), ``grpo``, ``dr_grpo``, ``rloo``,
  ``reinforce_pp``, ``reinforce_pp_baseline`` (:mod:`tinker_algos.builtins.estimators`);
* losses: ``cross_entropy`` (supervised), ``importance_sampling``, ``ppo``, ``cispo``, ``dro``,
  ``gspo``, ``stable_reinforce`` (policy), ``dpo``, ``cdpo``, ``ipo`` (preference), ``value`` (value), ``k1``, ``k2``, ``k3`` (kl)
  (:mod:`tinker_algos.builtins.losses`);
* optimizers: ``adamw``, ``sgd``, ``lion`` (:mod:`tinker_algos.builtins.optimizers`);
* the rollout engine ``hf``: the in-process sampler (:mod:`tinker_algos.sampling.engine`);
* the env ``agent/program-v0``: an agent program trained through the rollout proxy
  (:mod:`tinker_algos.rollout.agent_program`; its factory is imported on first use);
* the ``opentinker train`` command (:mod:`tinker_algos.commands.cli`), ``eval`` and ``export``
  (:mod:`tinker_algos.commands.cli_eval`), ``model`` (:mod:`tinker_algos.commands.cli_model`), ``compare``
  (:mod:`tinker_algos.commands.cli_compare`), ``fork`` and ``runs`` (:mod:`tinker_algos.commands.cli_steer`).
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

from tinker_algos.builtins import Deferred as Deferred  # re-exported: its home was this module
from tinker_core.hookspecs import hookimpl

if TYPE_CHECKING:
    import typer

    from tinker_core.contracts import LossKind
    from tinker_core.hookspecs import (
        DoctorCheckRegister,
        EstimatorRegister,
        LossRegister,
        OptimizerRegister,
        RolloutEngineRegister,
    )


ESTIMATOR_DESCRIPTIONS: dict[str, str] = {
    "gae": "GAE(gamma, lam) over the critic's values, masked whitening (needs a critic)",
    "grpo": "GRPO: (R - group mean) / (unbiased group std + eps), broadcast on the mask",
    "dr_grpo": "Dr.GRPO: R - group mean (no std division), broadcast on the mask",
    "rloo": "RLOO: R minus the mean reward of the rest of the group",
    "reinforce_pp": "REINFORCE++: discounted return-to-go, whitened over the batch",
    "reinforce_pp_baseline": "REINFORCE++-baseline: group-mean baseline, return-to-go, whitened",
}

LOSS_TABLE: dict[str, tuple[LossKind, str]] = {
    "cross_entropy": ("supervised", "weighted negative log-likelihood: -w * logp"),
    "importance_sampling": ("policy", "Tinker's importance-sampling policy gradient: -rho * A"),
    "ppo": ("policy", "PPO clipped surrogate, asymmetric clip, dual clip c=3"),
    "cispo": ("policy", "CISPO: -sg(clip(rho)) * A * logp"),
    "dro": ("policy", "Tinker's DRO: -(logp * A - beta/2 * (logp - logp_old)^2)"),
    "gspo": ("policy", "GSPO-token: PPO clip on the sequence ratio (geometric mean of token ratios)"),
    "stable_reinforce": ("policy", "REINFORCE, masked importance sampling vs the sampler, optional k3 KL"),
    "dpo": ("preference", "DPO: -log sigmoid(beta * Delta) per chosen/rejected pair"),
    "cdpo": ("preference", "conservative DPO with label smoothing (default 0.1)"),
    "ipo": ("preference", "IPO: (Delta - 1/(2 beta))^2 per chosen/rejected pair"),
    "value": ("value", "clipped value loss 0.5 * max((V-R)^2, (clip(V)-R)^2)"),
    "k1": ("kl", "KL to the reference policy, k1 estimator: logp - ref_logp"),
    "k2": ("kl", "KL to the reference policy, k2 estimator: (ref_logp - logp)^2 / 2"),
    "k3": ("kl", "KL to the reference policy, k3 estimator: exp(x) - x - 1"),
}
"""Name -> (kind, description) of every built-in loss."""

VANISHING_AT_ZERO_ADVANTAGE = frozenset({"importance_sampling", "ppo", "cispo", "gspo"})
"""The built-in policy losses whose value and gradient are exactly 0 on a token whose advantage is
0 (each term is a multiple of ``A``); they register with ``vanishes_at_zero_advantage=True``, as a
plugin's loss does (``dro``'s ``beta / 2 * (lp - lp_old)^2`` term does not vanish)."""

OPTIMIZER_DESCRIPTIONS: dict[str, str] = {
    "adamw": "AdamW (torch.optim.AdamW): lr, betas, eps, weight_decay, amsgrad",
    "sgd": "SGD (torch.optim.SGD): lr, momentum, dampening, weight_decay, nesterov",
    "lion": "Lion (Chen et al. 2023): sign update; lr, betas, weight_decay",
}


def agent_program_env(**kwargs: Any) -> Any:
    """An agent program run(task, client) -> reward, trained through the rollout proxy."""

    from tinker_algos.rollout.agent_program import AgentProgramEnv
    from tinker_core.errors import ConfigError, did_you_mean

    takes = [n for n in inspect.signature(AgentProgramEnv).parameters if n != "self"]
    unknown = [(k, did_you_mean(k, takes)) for k in kwargs if k not in takes]
    if unknown:
        raise ConfigError([f"env.kwargs.{k}: agent/program-v0 takes no argument {k!r}{f'; did you mean {near!r}?' if near else ''} "
                           f"(it takes {', '.join(takes)})" for k, near in unknown])
    return AgentProgramEnv(**kwargs)


@hookimpl
def opentinker_register_envs(register: Any) -> None:
    from tinker_algos.rollout.agent_calls import AGENT_PROGRAM_SPEC  # torch-free

    register(AGENT_PROGRAM_SPEC, agent_program_env)


@hookimpl
def opentinker_register_advantage_estimators(register: EstimatorRegister) -> None:
    from tinker_algos.builtins.estimators import ESTIMATORS

    for name, (fn, needs_critic) in ESTIMATORS.items():
        register(name, fn, needs_critic=needs_critic, description=ESTIMATOR_DESCRIPTIONS[name])


@hookimpl
def opentinker_register_losses(register: LossRegister) -> None:
    for name, (kind, description) in LOSS_TABLE.items():
        register(
            name,
            Deferred("tinker_algos.builtins.losses", name, description),
            kind=kind,
            description=description,
            vanishes_at_zero_advantage=name in VANISHING_AT_ZERO_ADVANTAGE,
        )


@hookimpl
def opentinker_register_optimizers(register: OptimizerRegister) -> None:
    for name, description in OPTIMIZER_DESCRIPTIONS.items():
        register(
            name, Deferred("tinker_algos.builtins.optimizers", name, description), description=description
        )


@hookimpl
def opentinker_register_rollout_engines(register: RolloutEngineRegister) -> None:
    """``hf``: the in-process sampler (:mod:`tinker_algos.sampling.engine`, imported when built)."""
    register("hf", Deferred("tinker_algos.sampling.engine", "hf_engine", "the in-process sampler"),
             description="the in-process sampler (tinker_algos.sampling.sampler) over the job's own model")


@hookimpl
def opentinker_register_doctor_checks(register: DoctorCheckRegister) -> None:
    """``opentinker doctor``: torch, its device and dtypes; the model cache (imported when run)."""
    register("torch", Deferred("tinker_algos.commands.doctor_checks", "check_torch", "torch, its device and dtypes"),
             description="torch, the device jobs train on and the dtypes that work there")
    register("model-cache", Deferred("tinker_algos.commands.doctor_checks", "check_model_cache", "the model cache"),
             description="the model cache: writable, room, the models it holds")


@hookimpl
def opentinker_register_commands(cli: typer.Typer) -> None:
    """Add ``opentinker train`` (embedded training, or ``submit --watch`` with ``--scheduler``)."""
    from tinker_algos.commands.cli import register

    register(cli)
    importlib.import_module("tinker_algos.commands.cli_model").register(cli)  # opentinker model import, fetch
    importlib.import_module("tinker_algos.commands.cli_eval").register(cli)  # opentinker eval, export
    importlib.import_module("tinker_algos.commands.cli_compare").register(cli)  # opentinker compare
    importlib.import_module("tinker_algos.commands.cli_steer").register(cli)  # opentinker fork, runs
