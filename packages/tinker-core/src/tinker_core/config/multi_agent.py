"""``algorithm.params.multi_agent`` of grpo: how an env with roles (a game) is played and trained.

Four modes: ``self_play`` (one policy plays every role and learns from all of them),
``opponent`` (the policy plays ``learner_role`` against a scripted opponent the env offers),
``learners`` (each role its own LoRA adapter on the shared base, with its own optimizer and,
optionally, its own ``optimizer`` (and ``optimizer_params``), ``lr``, ``loss`` and ``loss_config``
under ``roles``; each adapter learns from
its own role's turns only) and ``league`` (the policy plays a pool of its own past snapshots and,
optionally, scripted opponents; settings under ``league``). What only the env can tell (its roles, its opponents) is checked when
the stage starts, by ``tinker_algos.multiagent.MultiAgentParams.for_env``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

__all__ = ["MULTI_AGENT_MODES", "LeagueConfig", "MultiAgentConfig", "RoleLearnerConfig"]

MULTI_AGENT_MODES = ("self_play", "opponent", "learners", "league")
"""The values of ``algorithm.params.multi_agent.mode``."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class RoleLearnerConfig(_Model):
    """One role's learner in ``mode: learners`` (algorithm.params.multi_agent.roles.<role>); every
    field left out takes the stage's setting."""

    optimizer: str | None = Field(
        None, min_length=1, description="This role's optimizer by registered name (adamw, sgd, lion, or a plugin's); None = optimizer.name."
    )
    optimizer_params: dict[str, Any] | None = Field(
        None,
        description=(
            "This role's extra optimizer arguments (e.g. {momentum: 0.9} for sgd); None = optimizer.params when the role "
            "keeps the stage's optimizer, {} when it names another."
        ),
    )
    lr: float | None = Field(None, gt=0.0, description="This role's learning rate; None = optimizer.lr.")
    loss: str | None = Field(
        None, min_length=1, description="This role's policy loss by registered name; None = algorithm.loss (or grpo's default)."
    )
    loss_config: dict[str, float] | None = Field(
        None, description="Keyword arguments of this role's loss; None = algorithm.loss_config."
    )


class LeagueConfig(_Model):
    """The pool of ``mode: league`` (algorithm.params.multi_agent.league)."""

    pool_size: int = Field(4, ge=1, le=64, description="The most past snapshots of the policy in the pool; the oldest leaves first.")
    snapshot_every: int = Field(10, ge=1, le=1_000_000, description="Add a snapshot of the policy to the pool every this many steps.")
    sample: Literal["recency", "win_rate"] = Field(
        "recency",
        description=(
            "How a task's opponent is drawn: recency = weight 1/(1+age) (the newest snapshot 1, scripted members as the "
            "oldest); win_rate = weight 1.1 - the policy's win rate against the member so far (0.5 before any game)."
        ),
    )
    scripted: list[str] = Field(
        default_factory=list, description="Scripted opponents the env offers that are members of the pool too (e.g. [random, minimax])."
    )


class MultiAgentConfig(_Model):
    """How grpo plays an env with roles, a game (algorithm.params.multi_agent)."""

    mode: Literal["self_play", "opponent", "learners", "league"] = Field(
        "self_play",
        description=(
            "self_play: the policy plays every role and learns from all; opponent: it plays learner_role against "
            "a scripted opponent; learners: each role its own LoRA adapter (and optimizer), trained from its own "
            "turns only (needs lora); league: the policy plays a pool of its past snapshots (needs lora; see league)."
        ),
    )
    opponent: str = Field(
        "random",
        min_length=1,
        description=(
            "The scripted opponent in 'opponent' mode, by name: each env offers its own (its class's "
            "scripted_opponents; a name it does not offer fails, listing those it does), e.g. random or minimax on "
            "games/tictactoe-v0, random, conceder or boulware on games/negotiation-v0."
        ),
    )
    learner_role: str | None = Field(None, description="The policy's role in 'opponent' mode; None = the env's first role.")
    eval_opponent: str | None = Field(
        None, min_length=1, description="The scripted opponent of held-out evaluation (one the env offers); None = 'opponent'."
    )
    eval_opponents: list[str] | None = Field(
        None,
        min_length=1,
        description=(
            "Several scripted opponents of held-out evaluation (each one the env offers), e.g. [conceder, boulware]: every "
            "evaluation plays each; the first's numbers are logged under the usual eval/* keys, every opponent's under "
            "eval/vs/<opponent>/* (eval/vs/conceder/alice/reward_mean, ...). None = eval_opponent alone; set one of the two."
        ),
    )
    roles: dict[str, RoleLearnerConfig] | None = Field(
        None,
        description=(
            "'learners' mode: the env's roles, each with its own optional optimizer, lr, loss and loss_config ({} takes the "
            "stage's); None = every role of the env with the stage's settings."
        ),
    )

    league: LeagueConfig | None = Field(
        None, description="'league' mode: the pool of past snapshots and scripted opponents; None = the defaults."
    )

    @field_validator("learner_role")
    @classmethod
    def _role_needs_opponent_mode(cls, v: str | None, info: ValidationInfo) -> str | None:
        mode = info.data.get("mode")
        if v is not None and mode != "opponent":
            what = "self-play trains every role" if mode == "self_play" else "learners mode trains every role, each with its adapter"
            raise ValueError(f"only used with mode: opponent ({what}); remove learner_role or set mode: opponent")
        return v

    @field_validator("roles")
    @classmethod
    def _roles_need_learners_mode(cls, v: dict[str, RoleLearnerConfig] | None, info: ValidationInfo) -> dict[str, RoleLearnerConfig] | None:
        if v is not None and info.data.get("mode") != "learners":
            raise ValueError(
                f"only used with mode: learners (mode is {info.data.get('mode')!r}); set mode: learners to train "
                "one adapter per role, or remove roles"
            )
        if v is not None and not v:
            raise ValueError("is empty; name the env's roles (e.g. {x: {}, o: {}}) or leave roles out for all of them")
        return v

    @field_validator("eval_opponents")
    @classmethod
    def _one_list_of_eval_opponents(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if v is None:
            return v
        if info.data.get("eval_opponent") is not None:
            raise ValueError(
                f"set with eval_opponent ({info.data['eval_opponent']!r}); keep one: eval_opponents lists every held-out "
                "opponent, the first logged under the usual eval/* keys"
            )
        if any(not name for name in v):
            raise ValueError("names an empty opponent; list the env's scripted opponents by name, e.g. [conceder, boulware]")
        twice = sorted({name for name in v if v.count(name) > 1})
        if twice:
            raise ValueError(f"lists {', '.join(twice)} twice; name each opponent once")
        return v

    def held_out_opponents(self) -> list[str]:
        """The scripted opponents of held-out evaluation, in order: ``eval_opponents``, else
        ``eval_opponent``, else ``opponent``."""
        return list(self.eval_opponents or [self.eval_opponent or self.opponent])

    @field_validator("league")
    @classmethod
    def _league_needs_league_mode(cls, v: LeagueConfig | None, info: ValidationInfo) -> LeagueConfig | None:
        if v is not None and info.data.get("mode") != "league":
            raise ValueError(f"only used with mode: league (mode is {info.data.get('mode')!r}); set mode: league or remove league")
        return v
