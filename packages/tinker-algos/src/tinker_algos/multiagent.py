"""Multi-agent rollouts: a policy plays the roles of turn-based games, one trajectory per role.

How an episode runs
-------------------
:func:`multi_agent_rollout` plays one episode of a :class:`tinker_core.env.MultiAgentTextEnv`
per seed through the coordinator of tinker-env-games
(:func:`tinker_env_games.coordinator.play_episode_async`): the coordinator orders the turns,
credits per-turn rewards, forfeits a stuck or failing agent and ends the game for all roles at
once. Each role is played by

* a **learner** (:class:`Learner`, or just an adapter name): the policy samples the action
  (:func:`tinker_algos.sampler.sample`, with the learner's LoRA adapter) and the role's turns
  are recorded through the role's own :class:`tinker_core.fsm.TurnFSM`; or
* a **scripted agent** (:class:`Scripted`, e.g. ``opponent("random")`` or
  ``opponent("minimax")``, or any ``agent(role, observation) -> str``): it is not trained and
  produces no trajectory.

Modes: ``agents=None`` (or one :class:`Learner`) is **self-play** -- one policy/adapter plays
every role and the trajectories of all roles train it; a dict ``{role: Learner | Scripted}`` gives
**separate learners** (different adapters of one :class:`~tinker_algos.models.PolicyModel`) or a
**learner against an opponent**.

The trajectory of a learner role
--------------------------------
``[bos] obs_1 act_1 obs_2 act_2 ...`` where ``obs_k`` is what the env showed the role before its
``k``-th action. Observations are masked (the first appended in ``PENDING``, the others in
``INTERACTING``); actions are the sampled tokens (``GENERATING``, loss weight 1, with the
sampler's logprobs). ``turn_rewards`` are the coordinator's ``turn_rewards[role]``: the reward
credited to the role from each action until its next one, so a win or loss lands on the role's
last turn even when the other role's move ended the game. A reward a role receives before its
first action (the other role forfeits at once) counts in the episode's rewards but in no
trajectory; a role that never acted has no trajectory. ``group_id`` is
``group_ids[i] * num_roles + role_index``, so a GRPO group holds one role's episodes of one
task. ``info`` carries ``role``, ``adapter``, ``episode``, ``seed``, ``outcome`` and ``reason``.

Batching and determinism
------------------------
All episodes run concurrently on one event loop. A learner's request for a sample waits until
every unfinished episode has either asked for a sample or ended; then the requests are sampled
together, one batch per adapter (a *round*). Round ``r`` thus holds the ``r``-th policy turn of
each episode still running, whatever the threads' timing, and round ``r`` of adapter ``a`` is
sampled with a seed derived from ``(params.seed, r, a)``: the same seeds give the same
trajectories. Scripted agents get a fresh instance per episode, seeded from the episode's seed
(:class:`Scripted`), so they are deterministic too.

Timeouts and errors
-------------------
* Every scripted agent's call is limited to ``turn_timeout_s`` by the coordinator's own
  :func:`~tinker_env_games.coordinator.call_agent_async`; a stuck one forfeits
  (``forfeit-timeout``) and one that raises forfeits (``forfeit-error``). These are game
  outcomes: the learners' trajectories are kept and trained on.
* Learners are not put under the per-turn timeout: their requests wait for the other episodes
  of the round by design, so their latency is not their own. (The sampler itself runs in this
  process; it cannot be stuck on a remote party.)
* Env calls (``reset``, ``step``, ``observe``) run in a worker thread under ``turn_timeout_s``.
  An env that raises (``env_error``) or does not answer in time (``env_timeout``), and a
  learner whose context plus ``max_new_tokens`` would exceed the model's window
  (``context_overflow``), end their episode with an error: it is counted under
  ``rollout/errors/<reason>`` and left out of training. Above ``max_error_rate`` the rollout
  raises :class:`~tinker_algos.rollout.RolloutError`. An exception in the sampler is a bug, not
  a game event: it is raised.

GRPO (``algorithm.params.multi_agent``)
---------------------------------------
:class:`MultiAgentParams` parses ``{mode: self_play | opponent, opponent: random | minimax,
learner_role: x, eval_opponent: random | minimax}``; :func:`collect_for_grpo` and
:func:`evaluate_multi_agent` are what :class:`~tinker_algos.algorithms.grpo.GRPO` calls when
the stage's env has roles. See ``docs/algorithms/rollouts.md``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from tinker_algos.models import PolicyModel
from tinker_algos.rollout import RolloutError
from tinker_algos.sampler import SampledSequence, SamplingParams, sample
from tinker_core.fsm import TurnFSM, TurnState
from tinker_core.types import Trajectory

if TYPE_CHECKING:
    from tinker_core.env import EnvSpec
    from tinker_env_games.coordinator import EpisodeResult

__all__ = [
    "OPPONENTS",
    "Learner",
    "MultiAgentEpisode",
    "MultiAgentParams",
    "MultiAgentRolloutResult",
    "Scripted",
    "collect_for_grpo",
    "evaluate_multi_agent",
    "multi_agent_rollout",
    "opponent",
    "stage_env_spec",
]

Agent = Callable[[str, Any], Any]
"""``agent(role, observation) -> str`` (or an awaitable of it), as in the coordinator."""

OPPONENTS: tuple[str, ...] = ("random", "minimax")
"""Scripted opponents known by name (:func:`opponent`)."""


def _coordinator() -> Any:
    try:
        from tinker_env_games import coordinator
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError(
            "multi-agent rollouts use the coordinator of the tinker-env-games package; "
            "install it (pip install tinker-env-games)"
        ) from e
    return coordinator


def _mix_seed(*parts: Any) -> int:
    """A 31-bit seed from any parts, stable across processes."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------
# who plays a role
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Learner:
    """A role played by the policy (with LoRA ``adapter``; None: whatever is active).

    Its turns are recorded and returned as a :class:`~tinker_core.types.Trajectory`.
    """

    adapter: str | None = None


@dataclass(frozen=True)
class Scripted:
    """A role played by an agent that is not trained (an opponent, a rule, a fixed bot).

    ``make(seed)`` builds the agent for one episode (``seed`` is derived from the episode's seed,
    its index and the role), so a stateful agent such as ``RandomAgent`` is deterministic however
    the episodes interleave. Wrap a stateless agent with :meth:`of`.
    """

    make: Callable[[int], Agent]
    name: str = "scripted"

    @classmethod
    def of(cls, agent: Agent, name: str | None = None) -> Scripted:
        """The same ``agent`` object in every episode (it must not keep per-episode state)."""
        return cls(lambda _seed: agent, name or type(agent).__name__)


def opponent(name: str) -> Scripted:
    """A scripted opponent from tinker-env-games by name: ``random`` or ``minimax``.

    ``random`` plays a seeded random legal move (any game of that package); ``minimax`` plays
    perfect tic-tac-toe, choosing among optimal moves with a seeded RNG.
    """
    from tinker_env_games.opponents import MinimaxAgent, RandomAgent

    if name == "random":
        return Scripted(lambda seed: RandomAgent(seed=seed), "random")
    if name == "minimax":
        return Scripted(lambda seed: MinimaxAgent(seed=seed), "minimax")
    raise ValueError(f"unknown opponent {name!r}; choose one of {', '.join(OPPONENTS)}")


RoleSpec = Learner | Scripted | str | Agent
"""What may play a role: a :class:`Learner`, an adapter name (a learner with that adapter), a
:class:`Scripted` agent, or a plain agent callable (wrapped with :meth:`Scripted.of`)."""


def _resolve_agents(
    agents: Learner | str | Mapping[str, RoleSpec] | None, adapter: str | None, roles: Sequence[str]
) -> tuple[bool, dict[str, Learner | Scripted]]:
    """``(self_play, {role: Learner | Scripted})`` for the env's ``roles``."""
    if agents is None:
        return True, {r: Learner(adapter) for r in roles}
    if isinstance(agents, str):
        agents = Learner(agents)
    if isinstance(agents, Learner):
        return True, {r: agents for r in roles}
    if not isinstance(agents, Mapping):
        raise TypeError(
            f"agents must be None (self-play), a Learner, an adapter name or a dict role -> "
            f"Learner | Scripted | adapter name | agent; got {type(agents).__name__}"
        )
    missing = [r for r in roles if r not in agents]
    unknown = [r for r in agents if r not in roles]
    if missing or unknown:
        raise ValueError(
            f"agents must name every role of the env exactly once (roles: {', '.join(roles)}); "
            f"missing {missing}, unknown {unknown}"
        )
    plan: dict[str, Learner | Scripted] = {}
    for r in roles:
        a = agents[r]
        if isinstance(a, str):
            plan[r] = Learner(a)
        elif isinstance(a, Learner | Scripted):
            plan[r] = a
        elif callable(a):
            plan[r] = Scripted.of(a)
        else:
            raise TypeError(f"agents[{r!r}] is a {type(a).__name__}; give a Learner, Scripted, adapter name or agent")
    if not any(isinstance(p, Learner) for p in plan.values()):
        raise ValueError("agents has no Learner: at least one role must be played by the policy")
    return False, plan


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------
@dataclass
class MultiAgentEpisode:
    """One episode: the coordinator's result, the learners' trajectories, or the error."""

    index: int
    seed: int
    result: EpisodeResult | None
    trajectories: dict[str, Trajectory]
    learner_roles: tuple[str, ...]
    error: str | None = None
    error_message: str | None = None


@dataclass
class MultiAgentRolloutResult:
    """What :func:`multi_agent_rollout` returns; ``trajectories`` and ``metrics`` as for
    :class:`~tinker_algos.rollout.RolloutResult`."""

    episodes: list[MultiAgentEpisode]
    roles: tuple[str, ...]
    errors: Counter[str]
    new_tokens: int
    seconds: float
    rounds: int = 0

    @property
    def trajectories(self) -> list[Trajectory]:
        """Every learner trajectory of the episodes without error (episode order, then role order)."""
        return [
            ep.trajectories[r] for ep in self.episodes if ep.error is None for r in self.roles if r in ep.trajectories
        ]

    def trajectories_for(self, adapter: str | None) -> list[Trajectory]:
        """The trajectories of roles played with ``adapter`` (separate learners)."""
        return [t for t in self.trajectories if t.info.get("adapter") == adapter]

    def metrics(self, prefix: str = "env") -> dict[str, float]:
        """Learner-role means (``reward_mean``, ``success_rate`` = win rate, ``win/draw/loss_rate``),
        episode means (``turns_mean`` = env steps, ``truncated_rate``, ``forfeit_rate``), per role
        ``<prefix>/<role>/reward_mean`` and ``.../win_rate``, and ``rollout/*``."""
        ok = [(ep.result, ep.learner_roles) for ep in self.episodes if ep.error is None and ep.result is not None]
        games = [res for res, _ in ok]

        def mean(xs: Sequence[float]) -> float:
            return float(np.mean(xs)) if len(xs) else 0.0

        learner = [(res, r) for res, roles in ok for r in roles]
        out: dict[str, float] = {
            f"{prefix}/reward_mean": mean([res.rewards[r] for res, r in learner]),
            f"{prefix}/success_rate": mean([res.outcomes[r] == "win" for res, r in learner]),
            f"{prefix}/win_rate": mean([res.outcomes[r] == "win" for res, r in learner]),
            f"{prefix}/draw_rate": mean([res.outcomes[r] == "draw" for res, r in learner]),
            f"{prefix}/loss_rate": mean([res.outcomes[r] == "loss" for res, r in learner]),
            f"{prefix}/turns_mean": mean([res.num_steps for res in games]),
            f"{prefix}/truncated_rate": mean([res.reason == "truncated" for res in games]),
            f"{prefix}/forfeit_rate": mean([res.reason.startswith("forfeit") for res in games]),
        }
        for r in self.roles:
            out[f"{prefix}/{r}/reward_mean"] = mean([res.rewards[r] for res in games])
            out[f"{prefix}/{r}/win_rate"] = mean([res.outcomes[r] == "win" for res in games])
        n = len(self.episodes)
        out.update(
            {
                "rollout/episodes": float(n),
                "rollout/trajectories": float(len(self.trajectories)),
                "rollout/new_tokens": float(self.new_tokens),
                "rollout/sample_rounds": float(self.rounds),
                "rollout/error_rate": (n - len(games)) / max(n, 1),
                "rollout/tokens_per_s": self.new_tokens / max(self.seconds, 1e-9),
            }
        )
        for reason, k in sorted(self.errors.items()):
            out[f"rollout/errors/{reason}"] = float(k)
        return out


# ---------------------------------------------------------------------------------------------
# the machinery: env guard, batcher, per-episode agents
# ---------------------------------------------------------------------------------------------
class _EpisodeError(Exception):
    """Ends an episode with an error reason (env_error, env_timeout, context_overflow)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class _GuardedEnv:
    """Forwards everything to ``env``; ``reset``, ``step`` and ``observe`` run in a daemon thread
    under ``timeout_s`` (a stuck env is abandoned, never joined) and turn any failure into an
    :class:`_EpisodeError`."""

    def __init__(self, env: Any, timeout_s: float | None) -> None:
        object.__setattr__(self, "_env", env)
        object.__setattr__(self, "_timeout_s", timeout_s)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        box: dict[str, Any] = {}
        if self._timeout_s is None:
            try:
                return fn()
            except Exception as e:
                raise _EpisodeError("env_error", f"env.{what} raised {type(e).__name__}: {e}") from e
        done = threading.Event()

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the episode
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=target, name=f"opentinker-env-{what}", daemon=True).start()
        if not done.wait(self._timeout_s):
            raise _EpisodeError("env_timeout", f"env.{what} took longer than {self._timeout_s} s")
        if "error" in box:
            err = box["error"]
            raise _EpisodeError("env_error", f"env.{what} raised {type(err).__name__}: {err}") from err
        return box["value"]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self._call("reset", lambda: self._env.reset(seed=seed, options=options))

    def step(self, action: str) -> Any:
        return self._call("step", lambda: self._env.step(action))

    def observe(self, agent: str) -> Any:
        return self._call("observe", lambda: self._env.observe(agent))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._env, name, value)


@dataclass
class _Request:
    order: tuple[int, int]  # (episode index, role index): the row order within a round
    adapter: str | None
    context: list[int]
    future: asyncio.Future[SampledSequence]


class _Batcher:
    """Collects the learners' requests; samples a round once every live episode is waiting."""

    def __init__(
        self, policy: PolicyModel, params: SamplingParams, live: int, executor: cf.ThreadPoolExecutor
    ) -> None:
        self.policy = policy
        self.params = params
        self.live = live
        self.executor = executor
        self.pending: list[_Request] = []
        self.flushing = False
        self.rounds = 0
        self.failure: BaseException | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def request(self, order: tuple[int, int], adapter: str | None, context: list[int]) -> SampledSequence:
        future: asyncio.Future[SampledSequence] = asyncio.get_running_loop().create_future()
        self.pending.append(_Request(order, adapter, context, future))
        self._maybe_flush()
        return await future

    def episode_done(self) -> None:
        self.live -= 1
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        self.pending = [r for r in self.pending if not r.future.done()]
        if self.flushing or not self.pending or len(self.pending) < self.live:
            return
        batch = sorted(self.pending, key=lambda r: r.order)
        self.pending = []
        self.flushing = True
        task = asyncio.ensure_future(self._flush(batch, self.rounds))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _sample_round(self, batch: list[_Request], round_index: int) -> list[SampledSequence]:
        adapters = sorted({r.adapter for r in batch}, key=lambda a: (a is not None, a or ""))
        out: dict[tuple[int, int], SampledSequence] = {}
        for adapter in adapters:
            rows = [r for r in batch if r.adapter == adapter]
            seed = None if self.params.seed is None else _mix_seed(self.params.seed, round_index, adapter)
            params = replace(self.params, seed=seed, n=1)
            samples = sample(self.policy, [r.context for r in rows], params, adapter=adapter)
            for r, outs in zip(rows, samples, strict=True):
                out[r.order] = outs[0]
        return [out[r.order] for r in batch]

    async def _flush(self, batch: list[_Request], round_index: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            seqs = await loop.run_in_executor(self.executor, self._sample_round, batch, round_index)
        except BaseException as e:  # a sampler failure is a bug: fail every request and the rollout
            self.failure = self.failure or e
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(e)
        else:
            for r, s in zip(batch, seqs, strict=True):
                if not r.future.done():
                    r.future.set_result(s)
        finally:
            self.rounds += 1
            self.flushing = False
            self._maybe_flush()


class _Seat:
    """One learner role of one episode: its FSM and adapter."""

    def __init__(self, adapter: str | None) -> None:
        self.adapter = adapter
        self.fsm = TurnFSM()


class _EpisodeAgents:
    """The agents of one episode: the policy's seats (one FSM per learner role) and the
    scripted agents, each an ``async`` agent for the coordinator."""

    def __init__(
        self,
        index: int,
        seed: int,
        roles: Sequence[str],
        plan: Mapping[str, Learner | Scripted],
        batcher: _Batcher,
        tokenizer: Any,
        context_limit: int,
        max_new_tokens: int,
        turn_timeout_s: float | None,
    ) -> None:
        self.index = index
        self.roles = tuple(roles)
        self.batcher = batcher
        self.tok = tokenizer
        self.limit = context_limit
        self.max_new_tokens = max_new_tokens
        self.turn_timeout_s = turn_timeout_s
        self.seats = {r: _Seat(p.adapter) for r, p in plan.items() if isinstance(p, Learner)}
        self.scripted = {
            r: p.make(_mix_seed(seed, index, r)) for r, p in plan.items() if isinstance(p, Scripted)
        }
        self.new_tokens = 0
        self.overflow: str | None = None

    async def learner(self, role: str, observation: Any) -> str:
        """The policy's move for ``role``: sample, record in the role's FSM, answer the text."""
        seat = self.seats[role]
        fsm = seat.fsm
        if isinstance(observation, str):
            text = observation
        else:
            from tinker_algos.tokenizer import render_prompt

            text = render_prompt(self.tok, observation)
        obs_ids = list(self.tok.encode(text, add_special_tokens=fsm.num_turns == 0))
        if fsm.num_tokens + len(obs_ids) + self.max_new_tokens > self.limit:
            self.overflow = (
                f"role {role!r}: context of {fsm.num_tokens + len(obs_ids)} tokens + max_new_tokens="
                f"{self.max_new_tokens} exceeds the model's window of {self.limit} tokens"
            )
            raise _EpisodeError("context_overflow", self.overflow)
        seq = await self.batcher.request((self.index, self.roles.index(role)), seat.adapter, fsm.tokens + obs_ids)
        # no await from here on: the turn is recorded exactly when the coordinator gets the action
        fsm.append(obs_ids)  # PENDING (first turn) or INTERACTING: masked
        fsm.transition(TurnState.GENERATING)
        fsm.append(seq.tokens, logprobs=seq.logprobs)
        fsm.transition(TurnState.INTERACTING)
        self.new_tokens += len(seq.tokens)
        return seq.text

    def scripted_agent(self, role: str) -> Agent:
        coordinator = _coordinator()
        agent = self.scripted[role]

        async def call(r: str, observation: Any) -> Any:
            return await coordinator.call_agent_async(agent, r, observation, self.turn_timeout_s)

        return call

    def for_coordinator(self, self_play: bool) -> Any:
        if self_play:
            return _AsyncAgent(self.learner)
        return {
            r: _AsyncAgent(self.learner) if r in self.seats else _AsyncAgent(self.scripted_agent(r))
            for r in self.roles
        }

    def trajectories(self, result: EpisodeResult, group_id: int, seed: int) -> dict[str, Trajectory]:
        out: dict[str, Trajectory] = {}
        for ri, role in enumerate(self.roles):
            seat = self.seats.get(role)
            if seat is None or seat.fsm.num_turns == 0:
                continue
            rewards = result.turn_rewards[role]
            if len(rewards) != seat.fsm.num_turns:  # pragma: no cover - an internal invariant
                raise RuntimeError(
                    f"episode {self.index} role {role!r}: the coordinator recorded {len(rewards)} turns, "
                    f"the FSM {seat.fsm.num_turns}"
                )
            for r in rewards:
                seat.fsm.end_turn(r)
            seat.fsm.transition(TurnState.TERMINATED)
            out[role] = seat.fsm.to_trajectory(
                group_id=group_id * len(self.roles) + ri,
                role=role,
                adapter=seat.adapter,
                episode=self.index,
                seed=seed,
                outcome=result.outcomes[role],
                reason=result.reason,
            )
        return out


class _AsyncAgent:
    """Wraps a coroutine function so the coordinator sees an ``async def __call__`` agent."""

    def __init__(self, fn: Callable[[str, Any], Any]) -> None:
        self.fn = fn

    async def __call__(self, role: str, observation: Any) -> Any:
        return await self.fn(role, observation)


def _run_coroutine(make: Callable[[], Any]) -> Any:
    """``asyncio.run(make())``, in a helper thread when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="multiagent") as ex:
        return ex.submit(lambda: asyncio.run(make())).result()


# ---------------------------------------------------------------------------------------------
# the rollout
# ---------------------------------------------------------------------------------------------
def multi_agent_rollout(
    policy: PolicyModel,
    env_factory: Callable[[], Any],
    seeds: Sequence[int],
    params: SamplingParams,
    *,
    agents: Learner | str | Mapping[str, RoleSpec] | None = None,
    adapter: str | None = None,
    group_ids: Sequence[int] | None = None,
    turn_timeout_s: float | None = 30.0,
    max_steps: int | None = None,
    max_error_rate: float = 1.0,
    max_context_tokens: int | None = None,
    options: dict[str, Any] | None = None,
) -> MultiAgentRolloutResult:
    """Play one multi-agent episode per seed; see the module docstring.

    Args:
        policy: the model the learners sample from.
        env_factory: builds a fresh :class:`~tinker_core.env.MultiAgentTextEnv`.
        seeds: ``seeds[i]`` seeds episode ``i``'s ``env.reset`` (and its scripted agents).
        params: sampling settings (``n`` must be 1); ``params.seed`` seeds the rounds.
        agents: None or a :class:`Learner`/adapter name for self-play (``adapter`` plays every
            role when None), or ``{role: Learner | Scripted | adapter name | agent}``.
        group_ids: the task group of each episode (default: its index).
        turn_timeout_s: limit on each scripted agent call and each env call (None: no limit).
        max_steps: the most env steps per episode (default: the spec's ``max_turns``).
        max_error_rate: the fraction of failed episodes above which :class:`RolloutError` is raised.
        max_context_tokens: a learner's context limit (default: the model's window).
        options: passed to every ``env.reset``.
    """
    if params.n != 1:
        raise ValueError("multi_agent_rollout() samples one action per turn; set params.n = 1 and repeat seeds for groups")
    params.validate()
    coordinator = _coordinator()
    t0 = time.perf_counter()
    n = len(seeds)
    if n == 0:
        raise ValueError("multi_agent_rollout() got no seeds; pass one seed per episode")
    group_ids = list(group_ids) if group_ids is not None else list(range(n))
    if len(group_ids) != n:
        raise ValueError(f"group_ids has {len(group_ids)} entries for {n} seeds; give one per episode")
    tok = policy.tokenizer
    max_pos = getattr(policy.base_model.config, "max_position_embeddings", None)
    limit = int(max_context_tokens or max_pos or 10**9)

    errors: Counter[str] = Counter()
    episodes: list[MultiAgentEpisode | None] = [None] * n
    envs: list[Any] = [None] * n
    roles: tuple[str, ...] | None = None
    for i in range(n):
        try:
            envs[i] = env_factory()
        except Exception as e:
            errors["env_error"] += 1
            episodes[i] = MultiAgentEpisode(i, int(seeds[i]), None, {}, (), "env_error", f"env_factory raised {type(e).__name__}: {e}")
            continue
        if roles is None:
            if not hasattr(envs[i], "possible_agents") or not callable(getattr(envs[i], "observe", None)):
                raise TypeError(
                    f"env_factory built a {type(envs[i]).__name__}, not a MultiAgentTextEnv; "
                    "use tinker_algos.rollout.rollout for single-agent envs"
                )
            roles = tuple(envs[i].possible_agents)
    if roles is None:
        raise RolloutError(f"env_factory failed for all {n} episodes: {episodes[0].error_message if episodes[0] else ''}")
    self_play, plan = _resolve_agents(agents, adapter, roles)
    learner_roles = tuple(r for r in roles if isinstance(plan[r], Learner))
    for r, p in plan.items():
        if isinstance(p, Learner) and p.adapter is not None and p.adapter not in policy.adapter_names:
            raise ValueError(
                f"role {r!r} is played by adapter {p.adapter!r}, which the policy does not have "
                f"(adapters: {policy.adapter_names}); add it with policy.add_adapter({p.adapter!r})"
            )
    spec: EnvSpec | None = next((getattr(e, "env_spec", None) for e in envs if e is not None), None)
    steps_cap = max_steps or (spec.max_turns if spec is not None else coordinator.DEFAULT_MAX_STEPS)

    sample_pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ma-sample")
    seats: list[_EpisodeAgents | None] = [None] * n

    async def run_all() -> _Batcher:
        batcher = _Batcher(policy, params, live=sum(e is not None for e in envs), executor=sample_pool)

        async def one(i: int) -> None:
            seed = int(seeds[i])
            ea = _EpisodeAgents(i, seed, roles, plan, batcher, tok, limit, params.max_new_tokens, turn_timeout_s)
            seats[i] = ea
            try:
                result = await coordinator.play_episode_async(
                    _GuardedEnv(envs[i], turn_timeout_s),
                    ea.for_coordinator(self_play),
                    seed=seed,
                    options=options,
                    turn_timeout_s=None,  # scripted agents carry the limit themselves (see above)
                    max_steps=steps_cap,
                )
            except _EpisodeError as e:
                errors[e.reason] += 1
                episodes[i] = MultiAgentEpisode(i, seed, None, {}, learner_roles, e.reason, str(e))
            except Exception as e:
                errors["env_error"] += 1
                episodes[i] = MultiAgentEpisode(i, seed, None, {}, learner_roles, "env_error", f"{type(e).__name__}: {e}")
            else:
                if batcher.failure is not None:
                    episodes[i] = MultiAgentEpisode(i, seed, result, {}, learner_roles, "sampler_error", str(batcher.failure))
                elif ea.overflow is not None:
                    errors["context_overflow"] += 1
                    episodes[i] = MultiAgentEpisode(i, seed, result, {}, learner_roles, "context_overflow", ea.overflow)
                else:
                    trajs = ea.trajectories(result, int(group_ids[i]), seed)
                    episodes[i] = MultiAgentEpisode(i, seed, result, trajs, learner_roles)
            finally:
                batcher.episode_done()

        await asyncio.gather(*(one(i) for i in range(n) if envs[i] is not None))
        while batcher.tasks:  # a round whose every requester has gone (cannot happen; be tidy)
            await asyncio.gather(*list(batcher.tasks), return_exceptions=True)
        return batcher

    try:
        batcher = _run_coroutine(run_all)
    finally:
        for env in envs:
            if env is not None:
                with contextlib.suppress(Exception):
                    env.close()
        sample_pool.shutdown(wait=True)
    if batcher.failure is not None:
        raise batcher.failure
    done = [e for e in episodes if e is not None]
    assert len(done) == n
    new_tokens = sum(s.new_tokens for s in seats if s is not None)
    result = MultiAgentRolloutResult(done, roles, errors, new_tokens, time.perf_counter() - t0, batcher.rounds)
    failed = sum(errors.values())
    if failed / n > max_error_rate:
        raise RolloutError(
            f"{failed} of {n} multi-agent episodes failed ({dict(errors)}), above "
            f"rollout.max_error_rate={max_error_rate}; fix the environment or raise the limit"
        )
    return result


# ---------------------------------------------------------------------------------------------
# GRPO integration: algorithm.params.multi_agent
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MultiAgentParams:
    """``algorithm.params.multi_agent`` of a GRPO stage whose env has roles.

    Attributes:
        mode: ``self_play`` (default): the policy plays every role and learns from all of them;
            ``opponent``: the policy plays ``learner_role`` against a scripted ``opponent``.
        opponent: ``random`` (default) or ``minimax`` (tic-tac-toe only) -- the opponent in
            ``opponent`` mode.
        learner_role: the role the policy plays in ``opponent`` mode (default: the first role).
        eval_opponent: who the greedy policy plays in held-out evaluation (default: ``opponent``);
            evaluation alternates the policy's role over the env's roles.
    """

    mode: Literal["self_play", "opponent"] = "self_play"
    opponent: str = "random"
    learner_role: str | None = None
    eval_opponent: str | None = None

    FIELDS: ClassVar[tuple[str, ...]] = ("mode", "opponent", "learner_role", "eval_opponent")

    @classmethod
    def from_params(cls, raw: Any, spec: EnvSpec, *, where: str = "algorithm.params.multi_agent") -> MultiAgentParams:
        """Validate ``raw`` (a dict or None) against the env's spec; raise ``ConfigError`` naming the field."""
        from tinker_core.errors import ConfigError

        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise ConfigError([f"{where}: must be a mapping like {{mode: self_play}}, got {type(raw).__name__}"])
        problems: list[str] = []
        unknown = sorted(set(raw) - set(cls.FIELDS))
        if unknown:
            problems.append(f"{where}: unknown key(s) {unknown}; known: {', '.join(cls.FIELDS)}")
        mode = raw.get("mode", "self_play")
        if mode not in ("self_play", "opponent"):
            problems.append(f"{where}.mode: {mode!r} is not 'self_play' or 'opponent'")
        opp = raw.get("opponent", "random")
        eval_opp = raw.get("eval_opponent")
        for key, value in (("opponent", opp), ("eval_opponent", eval_opp)):
            if value is None and key == "eval_opponent":
                continue
            if value not in OPPONENTS:
                problems.append(f"{where}.{key}: {value!r} is not one of {', '.join(OPPONENTS)}")
            elif value == "minimax" and spec.id != "games/tictactoe-v0":
                problems.append(f"{where}.{key}: 'minimax' plays only games/tictactoe-v0, the env is {spec.id}; use 'random'")
        learner_role = raw.get("learner_role")
        if learner_role is not None and learner_role not in spec.roles:
            problems.append(f"{where}.learner_role: {learner_role!r} is not a role of {spec.id} ({', '.join(spec.roles)})")
        if learner_role is not None and mode == "self_play":
            problems.append(f"{where}.learner_role: only used with mode: opponent (self-play trains every role)")
        if problems:
            raise ConfigError(problems)
        return cls(mode=mode, opponent=opp, learner_role=learner_role, eval_opponent=eval_opp)

    def agents(self, roles: Sequence[str], adapter: str | None) -> Learner | dict[str, RoleSpec]:
        """The ``agents`` argument of :func:`multi_agent_rollout` for training."""
        if self.mode == "self_play":
            return Learner(adapter)
        learner = self.learner_role or roles[0]
        return {r: Learner(adapter) if r == learner else opponent(self.opponent) for r in roles}


def env_spec_of(env_factory: Callable[[], Any]) -> EnvSpec | None:
    """The spec of the env ``env_factory`` builds (one env is built and closed)."""
    env = env_factory()
    try:
        return getattr(env, "env_spec", None)
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()


def stage_env_spec(ctx: Any) -> EnvSpec | None:
    """The spec of a stage's env, building an env only when the registry says it has roles.

    A stage whose env is served from an ``address`` is single-agent here (the training loop
    connects to it with :class:`tinker_core.remote.RemoteEnv`): None.
    """
    env_cfg = getattr(ctx.stage, "env", None)
    if env_cfg is not None and env_cfg.address:
        return None
    if env_cfg is not None:
        import tinker_core

        spec: EnvSpec = tinker_core.env_spec(env_cfg.id)
        if not spec.roles:
            return spec
    return env_spec_of(ctx.require_env())  # the instance's spec (kwargs may change max_turns)


def collect_for_grpo(ctx: Any, step: int, settings: MultiAgentParams, spec: EnvSpec) -> MultiAgentRolloutResult:
    """GRPO's collect for a multi-agent env: ``prompts_per_step`` tasks x ``group_size`` episodes.

    Groups are (task, role): the episodes of one task share a reset seed, and each role's
    trajectories form their own group (zero-sum roles would cancel out in one group).
    """
    r = ctx.rollout_cfg
    P, G = r.prompts_per_step, r.group_size
    seeds = [ctx.step_seed(step, "task", p) for p in range(P) for _ in range(G)]
    group_ids = [p for p in range(P) for _ in range(G)]
    params = SamplingParams(
        max_new_tokens=r.max_new_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=r.top_k,
        stop=tuple(r.stop),
        seed=ctx.step_seed(step, "sample"),
    )
    return multi_agent_rollout(
        ctx.policy,
        ctx.require_env(),
        seeds,
        params,
        agents=settings.agents(spec.roles, ctx.adapter),
        group_ids=group_ids,
        turn_timeout_s=r.turn_timeout_s,
        max_steps=r.max_turns,
        max_error_rate=r.max_error_rate,
    )


def evaluate_multi_agent(
    policy: PolicyModel,
    env_factory: Callable[[], Any],
    num_episodes: int,
    *,
    seed: int,
    max_new_tokens: int,
    stop: Sequence[str] = ("\n",),
    opponent_name: str = "random",
    adapter: str | None = None,
    turn_timeout_s: float | None = 30.0,
    max_steps: int | None = None,
) -> dict[str, float]:
    """Greedy held-out play against a scripted opponent, the policy's role alternating.

    Episode ``i`` (of ``num_episodes``) has the policy play ``roles[i % num_roles]``. Returns
    ``eval/accuracy`` (= ``eval/win_rate``), ``eval/draw_rate``, ``eval/loss_rate``,
    ``eval/reward_mean``, ``eval/turns_mean``, ``eval/error_rate``.
    """
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop=tuple(stop), seed=seed)
    spec = env_spec_of(env_factory)
    roles = tuple(spec.roles) if spec is not None else ()
    if not roles:
        raise ValueError("evaluate_multi_agent() needs an env whose spec has roles")
    wins = draws = losses = 0
    rewards: list[float] = []
    turns: list[float] = []
    failed = 0
    for ri, role in enumerate(roles):
        idx = [i for i in range(num_episodes) if i % len(roles) == ri]
        if not idx:
            continue
        agents = {r: Learner(adapter) if r == role else opponent(opponent_name) for r in roles}
        res = multi_agent_rollout(
            policy, env_factory, [seed + i for i in idx], params, agents=agents,
            turn_timeout_s=turn_timeout_s, max_steps=max_steps,
        )
        for ep in res.episodes:
            if ep.error is not None or ep.result is None:
                failed += 1
                continue
            outcome = ep.result.outcomes[role]
            wins += outcome == "win"
            draws += outcome == "draw"
            losses += outcome == "loss"
            rewards.append(ep.result.rewards[role])
            turns.append(ep.result.num_steps)
    ok = max(len(rewards), 1)
    return {
        "eval/accuracy": wins / ok,
        "eval/win_rate": wins / ok,
        "eval/draw_rate": draws / ok,
        "eval/loss_rate": losses / ok,
        "eval/reward_mean": float(np.mean(rewards)) if rewards else 0.0,
        "eval/turns_mean": float(np.mean(turns)) if turns else 0.0,
        "eval/error_rate": failed / max(num_episodes, 1),
    }

