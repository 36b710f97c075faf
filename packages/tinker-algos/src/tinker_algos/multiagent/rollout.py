"""Multi-agent rollouts: a policy plays the roles of turn-based games, one trajectory per role.

How an episode runs
-------------------
:func:`multi_agent_rollout` plays one episode of a :class:`tinker_core.env.MultiAgentTextEnv`
per seed through tinker-core's coordinator (:func:`tinker_core.coordinator.play_episode_async`):
the coordinator orders the turns, credits per-turn rewards, forfeits a stuck or failing agent
and ends the game for all roles at once. Who plays each role is set by ``agents``
(:mod:`tinker_algos.multiagent.roles`): ``None`` (or one :class:`Learner`) is **self-play** --
one policy/adapter plays every role and the trajectories of all roles train it; a dict
``{role: Learner | Scripted | opponent(name)}`` gives **separate learners** (different adapters
of one :class:`~tinker_algos.model.models.PolicyModel`) or a **learner against an opponent**. A named
opponent is looked up on the env (its ``scripted_opponents``, see :mod:`tinker_core.opponents`).

The trajectory of a learner role
--------------------------------
``[bos] obs_1 act_1 obs_2 act_2 ...`` where ``obs_k`` is what the env showed the role before its
``k``-th action. Observations are masked (the first appended in ``PENDING``, the others in
``INTERACTING``); actions are the sampled tokens (``GENERATING``, loss weight 1, with the
sampler's logprobs). ``turn_rewards`` are the coordinator's ``turn_rewards[role]``: the reward
credited to the role from each action until its next one, so a win or loss lands on the role's
last turn even when the other role's move ended the game. A reward a role receives before its
first action (the other role forfeits at once) counts in the episode's rewards but in no
trajectory; a role that never acted has no trajectory. ``seeds`` are task seeds: each task is
played ``group_size`` times, and its trajectories form one
:class:`~tinker_core.TrajectoryGroup` per role (:attr:`MultiAgentRolloutResult.groups`;
``group_id`` is ``task * num_roles + role_index``), so a GRPO group holds one role's episodes of
one task. ``info`` carries ``role``, ``adapter``, ``episode``, ``seed``, ``outcome`` and ``reason``;
each episode records its seating (:attr:`MultiAgentEpisode.seats`: the roles in the order of their
first move), from which the per-seat metrics are counted.

Batching and determinism
------------------------
All episodes run concurrently on one event loop; the learners' requests are sampled in rounds
(:mod:`tinker_algos.multiagent.batcher`), each round seeded from ``(params.seed, round,
adapter)``, so the same seeds give the same trajectories. Scripted agents get a fresh instance
per episode, seeded from the episode's seed, so they are deterministic too.

Timeouts and errors
-------------------
* Every scripted agent's call is limited to ``turn_timeout_s`` by the coordinator's
  :func:`~tinker_core.coordinator.call_agent_async`; a stuck one forfeits (``forfeit-timeout``)
  and one that raises forfeits (``forfeit-error``). These are game outcomes: the learners'
  trajectories are kept and trained on.
* Learners are not put under the per-turn timeout: their requests wait for the other episodes
  of the round by design, so their latency is not their own. (The sampler itself runs in this
  process; it cannot be stuck on a remote party.)
* Env calls (``reset``, ``step``, ``observe``) run in a worker thread under ``turn_timeout_s``
  (:mod:`tinker_algos.multiagent.guarded_env`). An env that raises (``env_error``) or does not
  answer in time (``env_timeout``), and a learner whose context plus ``max_new_tokens`` would
  exceed the model's window (``context_overflow``), end their episode with an error: it is
  counted under ``rollout/errors/<reason>`` and left out of training. Above ``max_error_rate``
  the rollout raises :class:`~tinker_algos.rollout.RolloutError`. An exception in the sampler
  is a bug, not a game event: it is raised.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tinker_algos.model.models import PolicyModel
from tinker_algos.model.prompts import PromptRenderer
from tinker_algos.multiagent.batcher import Batcher
from tinker_algos.multiagent.episode import EpisodeAgents
from tinker_algos.multiagent.guarded_env import EpisodeError, GuardedEnv
from tinker_algos.multiagent.results import MultiAgentEpisode, MultiAgentRolloutResult
from tinker_algos.multiagent.roles import Learner, RoleSpec, resolve_agents
from tinker_algos.rollout.episodes import RolloutError, context_limit
from tinker_algos.sampling.sampler import SamplingParams
from tinker_core.coordinator import DEFAULT_MAX_STEPS, play_episode_async

if TYPE_CHECKING:
    from tinker_core.env import EnvSpec, MultiAgentTextEnv

__all__ = ["multi_agent_rollout", "run_coroutine"]


def run_coroutine(make: Callable[[], Any]) -> Any:
    """``asyncio.run(make())``, in a helper thread when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="multiagent") as ex:
        return ex.submit(lambda: asyncio.run(make())).result()


def multi_agent_rollout(
    policy: PolicyModel,
    env_factory: Callable[[], MultiAgentTextEnv],
    seeds: Sequence[int],
    params: SamplingParams,
    *,
    agents: Learner | str | Mapping[str, RoleSpec] | None = None,
    adapter: str | None = None,
    group_size: int = 1,
    turn_timeout_s: float | None = 30.0,
    max_steps: int | None = None,
    max_error_rate: float = 1.0,
    max_context_tokens: int | None = None,
    options: dict[str, Any] | None = None,
    renderer: PromptRenderer | None = None,
) -> MultiAgentRolloutResult:
    """Play ``group_size`` multi-agent episodes per task seed; see the module docstring.

    Args:
        policy: the model the learners sample from.
        env_factory: builds a fresh :class:`~tinker_core.env.MultiAgentTextEnv`.
        seeds: ``seeds[k]`` seeds the ``env.reset`` (and the scripted agents) of task ``k``'s
            episodes; episodes come task after task.
        params: sampling settings (``n`` must be 1); ``params.seed`` seeds the rounds.
        agents: None or a :class:`Learner`/adapter name for self-play (``adapter`` plays every
            role when None), or ``{role: Learner | Scripted | opponent(name) | adapter name |
            agent}``; a named opponent is looked up on the env (``scripted_opponents``).
        group_size: the episodes per task (a GRPO group per task and role).
        turn_timeout_s: limit on each scripted agent call and each env call (None: no limit).
        max_steps: the most env steps per episode (default: the spec's ``max_turns``).
        max_error_rate: the fraction of failed episodes above which :class:`RolloutError` is raised.
        max_context_tokens: a learner's context limit (default: the model's window).
        options: passed to every ``env.reset``.
        renderer: turns observations into tokens (default: ``model.chat_template: auto``).
    """
    if params.n != 1:
        raise ValueError("multi_agent_rollout() samples one action per turn; set params.n = 1 and use group_size for groups")
    params.validate()
    if not seeds:
        raise ValueError("multi_agent_rollout() got no seeds; pass one seed per task")
    if group_size < 1:
        raise ValueError(f"multi_agent_rollout(): group_size must be >= 1, got {group_size}")
    t0 = time.perf_counter()
    renderer = renderer or PromptRenderer.from_config(policy.tokenizer, "auto")
    if renderer.extra_eos_ids:
        params = SamplingParams(**{**params.__dict__, "eos_token_ids": (*params.eos_token_ids, *renderer.extra_eos_ids)})
    run = _MultiAgentRollout(policy, params, renderer, turn_timeout_s, options)
    run.make_envs(env_factory, [int(s) for s in seeds for _ in range(group_size)], group_size)
    run.plan_roles(agents, adapter, max_steps)
    sample_pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ma-sample")
    try:
        batcher = run_coroutine(lambda: run.play_all(sample_pool, context_limit(policy, max_context_tokens)))
    finally:
        run.close()
        sample_pool.shutdown(wait=True)
    if batcher.failure is not None:
        raise batcher.failure
    return run.result(batcher, max_error_rate, time.perf_counter() - t0)


class _MultiAgentRollout:
    """The state of one :func:`multi_agent_rollout` call: its envs, who plays, the episodes' results."""

    def __init__(self, policy: PolicyModel, params: SamplingParams, renderer: PromptRenderer,
                 turn_timeout_s: float | None, options: dict[str, Any] | None) -> None:
        self.policy, self.params, self.renderer = policy, params, renderer
        self.turn_timeout_s, self.options = turn_timeout_s, options
        self.errors: Counter[str] = Counter()
        self.envs: list[Any] = []
        self.seeds: list[int] = []
        self.group_size = 1
        self.episodes: list[MultiAgentEpisode | None] = []
        self.seats: list[EpisodeAgents | None] = []
        self.roles: tuple[str, ...] = ()

    def make_envs(self, env_factory: Callable[[], MultiAgentTextEnv], seeds: list[int], group_size: int) -> None:
        """One env per episode; an env that cannot be built fails its episode (``env_error``)."""
        n = len(seeds)
        self.seeds, self.group_size = seeds, group_size
        self.envs, self.episodes, self.seats = [None] * n, [None] * n, [None] * n
        for i in range(n):
            try:
                self.envs[i] = env_factory()
            except Exception as e:
                self.errors["env_error"] += 1
                self.episodes[i] = MultiAgentEpisode(i, seeds[i], None, {}, (), "env_error", f"env_factory raised {type(e).__name__}: {e}")
                continue
            if not self.roles:
                if not hasattr(self.envs[i], "possible_agents") or not callable(getattr(self.envs[i], "observe", None)):
                    raise TypeError(
                        f"env_factory built a {type(self.envs[i]).__name__}, not a MultiAgentTextEnv; "
                        "use tinker_algos.rollout.rollout for single-agent envs"
                    )
                self.roles = tuple(self.envs[i].possible_agents)
        if not self.roles:
            first = self.episodes[0]
            raise RolloutError(f"env_factory failed for all {n} episodes: {first.error_message if first else ''}")

    def plan_roles(self, agents: Learner | str | Mapping[str, RoleSpec] | None, adapter: str | None, max_steps: int | None) -> None:
        """Who plays each role (checking the learners' adapters), the env spec and the step cap."""
        live = [e for e in self.envs if e is not None]
        self.self_play, self.plan = resolve_agents(agents, adapter, self.roles, live[0])
        self.learner_roles = tuple(r for r in self.roles if isinstance(self.plan[r], Learner))
        for r, p in self.plan.items():
            if isinstance(p, Learner) and p.adapter is not None and p.adapter not in self.policy.adapter_names:
                raise ValueError(
                    f"role {r!r} is played by adapter {p.adapter!r}, which the policy does not have "
                    f"(adapters: {self.policy.adapter_names}); add it with policy.add_adapter({p.adapter!r})"
                )
        self.spec: EnvSpec | None = next((getattr(e, "env_spec", None) for e in live), None)
        self.steps_cap = max_steps or (self.spec.max_turns if self.spec is not None else DEFAULT_MAX_STEPS)

    async def play_all(self, sample_pool: cf.ThreadPoolExecutor, limit: int) -> Batcher:
        """Play every episode on one event loop; the learners' samples go through one :class:`Batcher`."""
        batcher = Batcher(self.policy, self.params, live=sum(e is not None for e in self.envs), executor=sample_pool)
        await asyncio.gather(*(self.play(i, batcher, limit) for i in range(len(self.envs)) if self.envs[i] is not None))
        while batcher.tasks:  # a round whose every requester has gone (cannot happen; be tidy)
            await asyncio.gather(*list(batcher.tasks), return_exceptions=True)
        return batcher

    async def play(self, i: int, batcher: Batcher, limit: int) -> None:
        """Play episode ``i`` through the coordinator; record its result or its error."""
        seed, roles = self.seeds[i], self.learner_roles
        ea = EpisodeAgents(
            i, seed, self.roles, self.plan, batcher, self.renderer, limit, self.params.max_new_tokens, self.turn_timeout_s,
            system_prompt=self.spec.system_prompt if self.spec is not None else "",
            tools=self.spec.tools if self.spec is not None else (),
        )
        self.seats[i] = ea
        try:
            result = await play_episode_async(
                GuardedEnv(self.envs[i], self.turn_timeout_s),
                ea.for_coordinator(self.self_play),
                seed=seed,
                options=self.options,
                turn_timeout_s=None,  # scripted agents carry the limit themselves (see above)
                max_steps=self.steps_cap,
            )
        except EpisodeError as e:
            self.errors[e.reason] += 1
            self.episodes[i] = MultiAgentEpisode(i, seed, None, {}, roles, e.reason, str(e))
        except Exception as e:
            self.errors["env_error"] += 1
            self.episodes[i] = MultiAgentEpisode(i, seed, None, {}, roles, "env_error", f"{type(e).__name__}: {e}")
        else:
            if batcher.failure is not None:
                self.episodes[i] = MultiAgentEpisode(i, seed, result, {}, roles, "sampler_error", str(batcher.failure))
            elif ea.overflow is not None:
                self.errors["context_overflow"] += 1
                self.episodes[i] = MultiAgentEpisode(i, seed, result, {}, roles, "context_overflow", ea.overflow)
            else:
                trajs = ea.trajectories(result, i // self.group_size, seed)
                self.episodes[i] = MultiAgentEpisode(i, seed, result, trajs, roles, seats=ea.seating)
        finally:
            batcher.episode_done()

    def close(self) -> None:
        for env in self.envs:
            if env is not None:
                with contextlib.suppress(Exception):
                    env.close()

    def result(self, batcher: Batcher, max_error_rate: float, seconds: float) -> MultiAgentRolloutResult:
        done = [e for e in self.episodes if e is not None]
        n = len(self.episodes)
        assert len(done) == n
        new_tokens = sum(s.new_tokens for s in self.seats if s is not None)
        failed = sum(self.errors.values())
        if failed / n > max_error_rate:
            raise RolloutError(
                f"{failed} of {n} multi-agent episodes failed ({dict(self.errors)}), above "
                f"rollout.max_error_rate={max_error_rate}; fix the environment or raise the limit"
            )
        return MultiAgentRolloutResult(done, self.roles, self.errors, new_tokens, seconds, batcher.rounds, self.group_size)
