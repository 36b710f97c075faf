"""Text environments: the contract every OpenTinker environment satisfies.

An environment is a :class:`gymnasium.Env` whose observations and actions are text. A
single-agent env subclasses :class:`TextEnv`; a turn-based multi-agent env subclasses
:class:`MultiAgentTextEnv` (PettingZoo's agent-environment-cycle shape). Each env carries an
:class:`EnvSpec`, a JSON-serialisable descriptor.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import gymnasium as gym
from gymnasium import spaces

if TYPE_CHECKING:
    import numpy as np

from tinker_core.contracts import (  # noqa: F401 - re-exported: the env exchange types live in contracts
    TURN_ENDS,
    Action,
    Message,
    Observation,
    StepResult,
    TurnEnd,
    turn_end_of,
)
from tinker_core.tools import check_tools

ActionFormat = Literal["text", "chat"]

ENV_ID_RE = re.compile(r"^(?P<namespace>[a-z0-9][a-z0-9_.-]*)/(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)-v(?P<version>\d+)$")

UNAVAILABLE = "unavailable"
"""The ``EnvSpec.metadata`` key a plugin sets when an env it registers cannot be built here: why,
and what to install (``needs the Python package 'textarena': pip install ...``).
``opentinker plugins`` lists such ids apart, with the reason."""


def parse_env_id(env_id: str) -> tuple[str, str, int]:
    """Split ``namespace/name-vN`` into its parts; raise ValueError naming the rule otherwise."""
    m = ENV_ID_RE.fullmatch(env_id)
    if not m:
        raise ValueError(
            f"env id {env_id!r} is not of the form 'namespace/name-vN' "
            "(lower-case namespace, e.g. 'math/arithmetic-v0')"
        )
    return m["namespace"], m["name"], int(m["version"])


@dataclass(frozen=True)
class EnvSpec:
    """Describes an environment; travels with every env and round-trips through JSON exactly.

    Attributes:
        id: ``namespace/name-vN``, the namespace being the registering project's short name.
        description: one paragraph a user reads in ``opentinker plugins``.
        max_turns: the most policy turns an episode can take (the env truncates after it).
        reward_range: the smallest and largest reward a single step can give.
        action_format: a hint to the policy's prompt: what a good action looks like.
        observation_type: ``"text"`` (plain strings) or ``"chat"`` (lists of messages).
        roles: the agent names for a multi-agent env; empty for a single-agent env.
        system_prompt: a system message for chat models, put before the first observation when
            the policy's prompts go through a chat template (``model.chat_template``); ignored
            for plain-text prompts and when the observation already starts with a system
            message. Omitted from :meth:`to_dict` when empty, so older readers accept the JSON.
        tools: the tools the policy may call, in the OpenAI function format
            (``{"type": "function", "function": {"name", "description", "parameters"}}``,
            checked by :func:`tinker_core.tools.check_tools`). The renderer gives them to the chat
            template (or writes them into the system prompt in the default format), and the
            rollout parses the calls of each action into ``Action.tool_calls``. Omitted from
            :meth:`to_dict` when empty.
        agent_program: the env is an :class:`~tinker_core.agent_program.AgentProgram`, played by
            a program ``run(task, client)`` through the job's rollout proxy instead of by
            ``step``; the trainer reads it from the registered spec before building the env.
            Omitted from :meth:`to_dict` when false.
        import_kwargs: the env's kwargs that name code it imports: a ``"module:attr"`` string or
            a module name (``agent/program-v0``'s ``entry``, ``tasks``, ``reward``). A scheduler
            refuses a job whose value there is not code its operator allowed, and refuses such
            an env's ``path`` kwarg (a folder put on ``sys.path``) unless it allows everything
            (:mod:`tinker_core.import_policy`); the env loads that code after
            :func:`tinker_core.check_import`. A kwarg value of another type (a list of tasks) is
            data. Omitted from :meth:`to_dict` when empty.
        difficulty_levels: the env's difficulty levels, easiest first, each a mapping of env
            kwargs that set that level (``{"digits": 1}``, ``{"digits": 2}``, ...). A GRPO stage
            with ``rollout.curriculum.enabled`` draws its training prompts at one level at a time
            (those kwargs over the stage's ``env.kwargs``) and moves by recent success. Omitted
            from :meth:`to_dict` when empty.
        metadata: anything else JSON-serialisable (tags, citation, default kwargs...).
    """

    id: str
    description: str = ""
    max_turns: int = 1
    reward_range: tuple[float, float] = (0.0, 1.0)
    action_format: str = ""
    observation_type: ActionFormat = "text"
    roles: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    system_prompt: str = ""
    tools: tuple[dict[str, Any], ...] = ()
    agent_program: bool = False
    import_kwargs: tuple[str, ...] = ()
    difficulty_levels: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        parse_env_id(self.id)
        if self.max_turns < 1:
            raise ValueError(f"EnvSpec {self.id!r}: max_turns must be >= 1, got {self.max_turns}")
        lo, hi = self.reward_range
        if lo > hi:
            raise ValueError(f"EnvSpec {self.id!r}: reward_range low {lo} > high {hi}")
        if self.observation_type not in ("text", "chat"):
            raise ValueError(
                f"EnvSpec {self.id!r}: observation_type must be 'text' or 'chat', "
                f"got {self.observation_type!r}"
            )
        if len(set(self.roles)) != len(self.roles):
            raise ValueError(f"EnvSpec {self.id!r}: roles must be unique, got {self.roles}")
        # normalise sequences so a JSON round trip gives an equal object
        object.__setattr__(self, "reward_range", (float(lo), float(hi)))
        object.__setattr__(self, "roles", tuple(self.roles))
        object.__setattr__(self, "import_kwargs", tuple(self.import_kwargs))
        object.__setattr__(self, "difficulty_levels", tuple(dict(level) for level in self.difficulty_levels))
        if any(not level for level in self.difficulty_levels):
            raise ValueError(f"EnvSpec {self.id!r}: each difficulty level is a non-empty mapping of env kwargs")
        json.dumps(self.difficulty_levels)
        if self.tools:
            object.__setattr__(self, "tools", check_tools(self.tools, f"EnvSpec {self.id!r}: tools"))
        else:
            object.__setattr__(self, "tools", ())
        json.dumps(self.metadata)  # raises TypeError early when not JSON-serialisable

    @property
    def namespace(self) -> str:
        return parse_env_id(self.id)[0]

    @property
    def is_multi_agent(self) -> bool:
        return bool(self.roles)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["reward_range"] = list(self.reward_range)
        d["roles"] = list(self.roles)
        if not self.system_prompt:
            del d["system_prompt"]
        if self.tools:
            d["tools"] = [dict(t) for t in self.tools]
        else:
            del d["tools"]
        if not self.agent_program:
            del d["agent_program"]
        if self.import_kwargs:
            d["import_kwargs"] = list(self.import_kwargs)
        else:
            del d["import_kwargs"]
        if self.difficulty_levels:
            d["difficulty_levels"] = [dict(level) for level in self.difficulty_levels]
        else:
            del d["difficulty_levels"]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnvSpec:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"EnvSpec: unknown field(s) {sorted(unknown)}")
        data = dict(data)
        if "reward_range" in data:
            data["reward_range"] = tuple(data["reward_range"])
        if "roles" in data:
            data["roles"] = tuple(data["roles"])
        if "tools" in data:
            data["tools"] = tuple(data["tools"])
        if "import_kwargs" in data:
            data["import_kwargs"] = tuple(data["import_kwargs"])
        if "difficulty_levels" in data:
            data["difficulty_levels"] = tuple(data["difficulty_levels"])
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> EnvSpec:
        return cls.from_dict(json.loads(text))


class TextSpace(spaces.Text):
    """gymnasium's Text space with printable ASCII plus newline/tab, up to ``max_length``."""

    def __init__(self, max_length: int = 65536, seed: int | None = None) -> None:
        charset = "".join(chr(c) for c in range(32, 127)) + "\n\t"
        super().__init__(max_length=max_length, min_length=0, charset=charset, seed=seed)

    def contains(self, x: object) -> bool:  # any str is a valid text action or observation
        return isinstance(x, str) and len(x) <= self.max_length


class TextEnv(gym.Env[Observation, str]):
    """A gymnasium environment over text.

    Subclasses set ``spec_`` (an :class:`EnvSpec`) and implement :meth:`reset` and :meth:`step`.
    ``reset`` must call ``super().reset(seed=seed)`` so ``self.np_random`` is seeded: the same
    seed gives the same episode.
    """

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012 - gymnasium declares it per instance
    env_spec: EnvSpec

    observation_space = TextSpace()
    action_space = TextSpace()

    # reset() and step() come from gymnasium.Env: subclasses implement both, and reset() calls
    # super().reset(seed=seed) first.


class MultiAgentTextEnv:
    """A turn-based multi-agent text env in PettingZoo's agent-environment-cycle (AEC) style.

    ``possible_agents`` are the role names; ``agent_selection`` is the role whose turn it is;
    ``observe(role)`` shows a role its view; ``step(action)`` applies the current role's action
    and advances the turn. ``rewards``, ``terminations``, ``truncations`` and ``infos`` are dicts
    keyed by role, updated after each step; ``_cumulative_rewards`` sums rewards over the episode.
    The episode is over when every role is terminated or truncated (``done``).

    Subclasses implement :meth:`reset`, :meth:`observe` and :meth:`step`, and use
    ``self.np_random`` (seeded by ``reset``) for randomness. A game's per-step bookkeeping has
    one home here: ``step`` opens with :meth:`_begin_step` and closes with :meth:`_end_step`
    (which calls the subclass's :meth:`_update_infos`); an env that can be forfeited defines
    ``forfeit(role, reason)`` as ``if self._begin_forfeit(role): <end the game>;
    self._end_step()``.
    """

    env_spec: EnvSpec
    possible_agents: list[str]
    agents: list[str]
    agent_selection: str
    rewards: dict[str, float]
    terminations: dict[str, bool]
    truncations: dict[str, bool]
    infos: dict[str, dict[str, Any]]
    _cumulative_rewards: dict[str, float]

    _np_random: np.random.Generator | None = None

    @property
    def np_random(self) -> np.random.Generator:
        if self._np_random is None:
            self._np_random, _ = gym.utils.seeding.np_random()
        return self._np_random

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start a new episode. Subclasses call ``super().reset(seed=seed)`` first."""
        if seed is not None or self._np_random is None:
            self._np_random, _ = gym.utils.seeding.np_random(seed)
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}

    def observe(self, agent: str) -> Observation:  # pragma: no cover - subclasses implement
        raise NotImplementedError

    def step(self, action: str) -> None:  # pragma: no cover - subclasses implement
        raise NotImplementedError

    def last(self) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """The current role's observation, cumulative reward, termination, truncation, info."""
        a = self.agent_selection
        return (
            self.observe(a),
            self._cumulative_rewards[a],
            self.terminations[a],
            self.truncations[a],
            self.infos[a],
        )

    @property
    def done(self) -> bool:
        return all(self.terminations[a] or self.truncations[a] for a in self.possible_agents)

    def _accumulate_rewards(self) -> None:
        for a, r in self.rewards.items():
            self._cumulative_rewards[a] = self._cumulative_rewards.get(a, 0.0) + r

    # ---- game bookkeeping, for subclasses ----------------------------------------------------
    def check_role(self, role: str) -> None:
        """Raise ``KeyError`` naming the roles when ``role`` is not one of ``possible_agents``."""
        if role not in self.possible_agents:
            raise KeyError(f"unknown role {role!r}; roles are {', '.join(self.possible_agents)}")

    def _begin_step(self) -> str:
        """Open a ``step``: refuse one after the game is over, zero this step's ``rewards``;
        returns the role to move."""
        if self.done:
            raise RuntimeError(f"{type(self).__name__}.step: the game is over; call reset()")
        self.rewards = {r: 0.0 for r in self.possible_agents}
        return self.agent_selection

    def _begin_forfeit(self, role: str) -> bool:
        """Open a ``forfeit(role, reason)``: check ``role``; False when the game is already over
        (the forfeit is then a no-op), else zero this step's ``rewards`` and return True."""
        self.check_role(role)
        if self.done:
            return False
        self.rewards = {r: 0.0 for r in self.possible_agents}
        return True

    def _end_step(self) -> None:
        """Close a ``step`` or a forfeit: add this step's ``rewards`` to the episode totals and
        refresh ``infos``."""
        self._accumulate_rewards()
        self._update_infos()

    def _update_infos(self) -> None:
        """Refresh ``infos`` after a step (:meth:`_end_step` calls it); the default keeps them."""

    def close(self) -> None:
        """Release resources; the default has none."""

    def render(self) -> str | None:
        return None


AnyTextEnv: TypeAlias = TextEnv | MultiAgentTextEnv
