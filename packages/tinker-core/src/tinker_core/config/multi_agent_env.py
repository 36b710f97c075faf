"""``algorithm.params.multi_agent`` checked against the env it plays: what only the env can tell.

The config's schema (:mod:`tinker_core.config.multi_agent`) types the keys; these checks need the
env's registered spec (its roles) and its scripted opponents. ``opentinker config validate`` runs
them (through :func:`tinker_core.config.loading.check_plugin_names`), and so does the trainer
before the first rollout (``tinker_algos.multiagent.params.MultiAgentParams.for_env``), so a config
that validates is one ``train`` accepts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.errors import UnknownNameError
from tinker_core.opponents import scripted_opponents

if TYPE_CHECKING:
    from tinker_core.config.multi_agent import MultiAgentConfig
    from tinker_core.env import EnvSpec

__all__ = ["multi_agent_problems", "offered_opponents"]


def offered_opponents(spec: EnvSpec) -> list[str]:
    """The names of the scripted opponents the env of ``spec`` offers (none for an env that is
    not registered under its id)."""
    try:
        return sorted(scripted_opponents(spec.id))
    except UnknownNameError:
        return []


def multi_agent_problems(config: MultiAgentConfig, spec: EnvSpec, where: str, lora: bool) -> list[str]:
    """What is wrong with ``config`` for the env of ``spec`` (``lora``: the job trains LoRA
    adapters): the opponents that will be played (``opponent`` in ``opponent`` mode, and the
    evaluation opponents, ``eval_opponents``, else ``eval_opponent``, else ``opponent``) must be offered by the env,
    ``learner_role`` must be one of its roles; ``learners`` and ``league`` modes need LoRA, and
    ``learners``' ``roles`` name exactly the env's roles."""
    written = config.model_fields_set
    # training (mode: opponent) plays `opponent`; held-out evaluation plays `eval_opponents`, else
    # `eval_opponent`, by default `opponent`: check each name that will be played, or that was written
    checked = [("eval_opponent", config.eval_opponent)] if config.eval_opponent is not None else []
    checked += [(f"eval_opponents[{i}]", name) for i, name in enumerate(config.eval_opponents or ())]
    if "opponent" in written or config.mode == "opponent" or len(checked) == 0:
        checked.insert(0, ("opponent", config.opponent))
    offered = offered_opponents(spec)
    problems = [
        f"{where}.{key}: {value!r}{'' if key.split('[')[0] in written else ' (the default)'} is not a scripted opponent of "
        f"{spec.id} (it offers: {', '.join(offered) or 'none'}; held-out evaluation plays against "
        "eval_opponents, else eval_opponent, default: opponent)"
        for key, value in checked
        if value not in offered
    ]
    if config.learner_role is not None and config.learner_role not in spec.roles:
        problems.append(f"{where}.learner_role: {config.learner_role!r} is not a role of {spec.id} ({', '.join(spec.roles)})")
    if config.mode == "learners":
        problems += _learner_problems(config, spec, where, lora)
    if config.mode == "league":
        if not lora:
            problems.append(
                f"{where}.mode: league keeps past snapshots of the policy as LoRA adapters, and this job fine-tunes "
                "the whole model; add a lora section (e.g. lora: {rank: 8}) or use mode: self_play"
            )
        scripted = config.league.scripted if config.league is not None else ()
        problems += [
            f"{where}.league.scripted[{i}]: {name!r} is not a scripted opponent of {spec.id} (it offers: "
            f"{', '.join(offered) or 'none'})"
            for i, name in enumerate(scripted) if name not in offered
        ]
    return problems


def _learner_problems(config: MultiAgentConfig, spec: EnvSpec, where: str, lora: bool) -> list[str]:
    """What is wrong with ``mode: learners`` for the env of ``spec`` (and the job's ``lora``)."""
    problems: list[str] = []
    if not lora:
        problems.append(
            f"{where}.mode: learners trains one LoRA adapter per role on the shared base, and this job fine-tunes "
            "the whole model; add a lora section (e.g. lora: {rank: 8}) or use mode: self_play"
        )
    if config.roles is not None:
        unknown = [r for r in config.roles if r not in spec.roles]
        missing = [r for r in spec.roles if r not in config.roles]
        problems += [
            f"{where}.roles.{r}: not a role of {spec.id} (its roles: {', '.join(spec.roles)}); name its roles, or leave "
            "roles out to train every role with the stage's settings"
            for r in unknown
        ]
        if missing:
            problems.append(
                f"{where}.roles: {', '.join(missing)} of {spec.id} missing; every role is a learner in this mode, so list "
                f"each (an empty {{}} takes the stage's settings), e.g. roles: {{{', '.join(f'{r}: {{}}' for r in spec.roles)}}}"
            )
    return problems
