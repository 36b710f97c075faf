"""The settings of an evaluation (``opentinker eval``): what to play and how, checked before a
model loads. :func:`eval_settings` takes a run's held-out settings (its stage's env with its
``eval_kwargs``, ``rollout`` limits, ``algorithm.eval_size``, the eval seed and, for a multi-agent
game, its ``eval_opponent``) with the command's options; :func:`check_env` builds the env once
and refuses what cannot be played, naming the option and the fix. Re-exported by
:mod:`tinker_algos.commands.evaluation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tinker_core import MultiAgentTextEnv, scripted_opponents
from tinker_core.config import EnvConfig, JobConfig, RolloutConfig, StageConfig
from tinker_core.errors import OpenTinkerError
from tinker_core.seeding import derive_seed


class EvalError(OpenTinkerError, ValueError):
    """A source, env or setting ``opentinker eval``/``export`` cannot use (the message says which)."""


@dataclass(frozen=True)
class EvalSettings:
    """What to evaluate on and how: the env section, episodes, samples and sampling limits."""

    env: EnvConfig
    n: int
    samples: int = 1
    max_new_tokens: int = 16
    stop: tuple[str, ...] = ("\n",)
    max_turns: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    #: the run's ``model.chat_template`` (how observations become prompts); None: the rollout's default
    chat_template: str | None = None
    #: True when ``n`` was asked for (``--n``): then :func:`check_env` refuses more problems than the
    #: env's split holds, when the env can say (a default ``n`` plays as training's evaluation does)
    n_asked: bool = False
    #: True when the opponent was asked for (``--opponent``): a single-agent env refuses it
    opponent_asked: bool = False
    #: a multi-agent game's scripted opponent (one its env offers): the run's first eval opponent
    #: (else ``opponent``), or ``--opponent``; None for a single-agent env
    opponent: str | None = None
    #: seconds a multi-agent turn may take (the rollout's ``turn_timeout_s``)
    turn_timeout_s: float | None = 30.0

    @property
    def eval_kwargs(self) -> dict[str, Any]:
        """The env factory's arguments for evaluation (``eval_kwargs``, else ``kwargs``)."""
        return dict(self.env.eval_kwargs if self.env.eval_kwargs is not None else self.env.kwargs)


def _stage_for(job: JobConfig, env_id: str | None) -> StageConfig | None:
    """The stage whose env an evaluation uses: the last with env ``env_id`` (any env when None)."""
    for stage in reversed(job.resolved_stages()):
        if stage.env is not None and (env_id is None or stage.env.id == env_id):
            return stage
    return None


#: The most problems (``--n``) and samples a problem (``--samples``) one evaluation plays: an
#: env with a finite split is capped by its size too (:func:`split_size`).
MAX_EVAL_PROBLEMS = 100_000
MAX_EVAL_SAMPLES = 1024


def check_counts(n: int | None, samples: int) -> None:
    """Refuse ``--n`` and ``--samples`` outside ``1..MAX_EVAL_PROBLEMS`` and ``1..MAX_EVAL_SAMPLES``:
    an :class:`EvalError` naming the option, the limit and the fix."""
    for option, value, most, what in (("--n", n, MAX_EVAL_PROBLEMS, "problems an evaluation plays"),
                                      ("--samples", samples, MAX_EVAL_SAMPLES, "samples a problem")):
        if value is not None and value < 1:
            raise EvalError(f"{option} must be at least 1 ({what}), got {value}")
        if value is not None and value > most:
            raise EvalError(f"{option} {value} is over the limit of {most} {what}; pass {option} {most} or fewer")


def split_size(env: object) -> int | None:
    """How many problems ``env``'s split holds, when it can say: ``len(env)`` of an env that defines
    ``__len__`` (``math/dataset-v0``: its records); None for an env that draws without end or is served elsewhere."""
    try:
        size = len(env) if hasattr(type(env), "__len__") else 0  # type: ignore[arg-type]
    except Exception:  # an env whose __len__ is not a size
        return None
    return size if isinstance(size, int) and size > 0 else None


def eval_settings(
    job: JobConfig | None,
    *,
    env_id: str | None = None,
    split: str | None = None,
    n: int | None = None,
    samples: int = 1,
    max_new_tokens: int | None = None,
    seed: int | None = None,
    opponent: str | None = None,
) -> EvalSettings:
    """The settings of an evaluation: the run's (``job``) held-out ones, with the options given.

    ``env_id``: another env than the run's (or the env of a run without one); the run's own env
    section is used when a stage trained on it. ``split``: sets the env's ``split`` argument.
    ``opponent``: a multi-agent game's scripted opponent (default: the stage's ``multi_agent``
    ``eval_opponents``' first, else its ``eval_opponent``, else its ``opponent``; ``random`` without one).
    """
    check_counts(n, samples)
    if max_new_tokens is not None and max_new_tokens < 1:
        raise EvalError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")
    stage = _stage_for(job, env_id) if job is not None else None
    if stage is None and env_id is None:
        where = "the run's config has no env" if job is not None else "this source has no run config"
        raise EvalError(f"{where}; pass --env ID to choose the environment")
    env = stage.env if stage is not None and stage.env is not None else EnvConfig(id=env_id)  # type: ignore[arg-type]
    asked_opponent = opponent is not None
    multi_agent = getattr(stage.algorithm.params, "multi_agent", None) if stage is not None else None
    if opponent is None and multi_agent is not None:  # the game the stage trained on: its opponent
        opponent = multi_agent.held_out_opponents()[0]
    # the sampling limits the policy was trained with, also on another env than the run's
    stage = stage or (job.resolved_stages()[-1] if job is not None else None)
    rollout: RolloutConfig = stage.rollout if stage is not None and stage.rollout is not None else RolloutConfig()
    if split is not None:
        env = env.model_copy(update={"eval_kwargs": {**(env.eval_kwargs if env.eval_kwargs is not None else env.kwargs), "split": split}})
    default_n = stage.algorithm.eval_size if stage is not None else 64
    return EvalSettings(
        env=env,
        n=n if n is not None else default_n,
        samples=samples,
        max_new_tokens=max_new_tokens or rollout.max_new_tokens,
        stop=tuple(rollout.stop),
        max_turns=rollout.max_turns,
        temperature=rollout.temperature if rollout.temperature > 0 else 1.0,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        seed=seed if seed is not None else derive_seed(job.seed if job is not None else 0, "eval"),
        chat_template=job.model.chat_template if job is not None else None,
        n_asked=n is not None,
        opponent=opponent,
        opponent_asked=asked_opponent,
        turn_timeout_s=rollout.turn_timeout_s,
    )


def check_env(settings: EvalSettings) -> str | None:
    """Build (and close) one env of ``settings``: an unknown id or bad argument is an :class:`EvalError`,
    and so is an asked-for ``n`` over the problems of the env's split (:func:`split_size`). Returns
    the scripted opponent of a multi-agent game (:func:`check_multi_agent`), None for a single-agent env."""
    from tinker_algos.rollout.episodes import make_env

    env = settings.env
    try:
        built = make_env(env, settings.eval_kwargs)
    except Exception as e:  # an unknown id, an argument the env does not take, a server not there
        raise EvalError(f"env {env.id!r} with arguments {settings.eval_kwargs}: {e}") from None
    try:
        if roles_of(built):
            return check_multi_agent(settings, built)
        if settings.opponent_asked:
            raise EvalError(f"--opponent applies to a multi-agent game; env {env.id!r} has no roles")
        size = split_size(built) if settings.n_asked else None
    finally:
        close = getattr(built, "close", None)
        if close is not None:
            close()
    if size is not None and settings.n > size:
        raise EvalError(f"--n {settings.n} is over the {size} problems of env {env.id!r} with arguments "
                        f"{settings.eval_kwargs}; pass --n {size} or fewer")
    return None


def roles_of(env: object) -> tuple[str, ...]:
    """A built env's roles (``possible_agents`` of a multi-agent game): empty for a single-agent env."""
    return tuple(env.possible_agents) if isinstance(env, MultiAgentTextEnv) else ()


def check_multi_agent(settings: EvalSettings, env: object) -> str:
    """The scripted opponent a multi-agent game's evaluation plays: ``settings.opponent``, else
    ``random`` when the env offers it, else the first it offers by name (as a stage without
    ``multi_agent`` settings is evaluated). An :class:`EvalError` naming the option and the fix for
    ``--samples`` (one greedy game a seed) or an opponent the env does not offer (its class's
    ``scripted_opponents``)."""
    if settings.samples != 1:
        raise EvalError(f"--samples {settings.samples}: a multi-agent game is played greedily, one game a seed; drop --samples")
    offered = sorted(scripted_opponents(env))
    if not offered:
        raise EvalError(f"env {settings.env.id!r} has roles but offers no scripted opponent to play against")
    opponent = settings.opponent or ("random" if "random" in offered else offered[0])
    if opponent not in offered:
        raise EvalError(f"--opponent {opponent!r}: env {settings.env.id!r} offers the scripted opponents {offered}; "
                        f"pass --opponent with one of them")
    return opponent
