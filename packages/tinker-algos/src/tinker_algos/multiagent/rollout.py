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
of one :class:`~tinker_algos.models.PolicyModel`) or a **learner against an opponent**. A named
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
trajectory; a role that never acted has no trajectory. ``group_id`` is
``group_ids[i] * num_roles + role_index``, so a GRPO group holds one role's episodes of one
task. ``info`` carries ``role``, ``adapter``, ``episode``, ``seed``, ``outcome`` and ``reason``.

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

from tinker_algos.models import PolicyModel
from tinker_algos.multiagent.batcher import Batcher
from tinker_algos.multiagent.episode import EpisodeAgents
from tinker_algos.multiagent.guarded_env import EpisodeError, GuardedEnv
from tinker_algos.multiagent.results import MultiAgentEpisode, MultiAgentRolloutResult
from tinker_algos.multiagent.roles import Learner, RoleSpec, resolve_agents
from tinker_algos.prompts import PromptRenderer
from tinker_algos.rollout import RolloutError
from tinker_algos.sampler import SamplingParams
from tinker_core.coordinator import DEFAULT_MAX_STEPS, play_episode_async

if TYPE_CHECKING:
    from tinker_core.env import EnvSpec

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
    renderer: PromptRenderer | None = None,
) -> MultiAgentRolloutResult:
    """Play one multi-agent episode per seed; see the module docstring.

    Args:
        policy: the model the learners sample from.
        env_factory: builds a fresh :class:`~tinker_core.env.MultiAgentTextEnv`.
        seeds: ``seeds[i]`` seeds episode ``i``'s ``env.reset`` (and its scripted agents).
        params: sampling settings (``n`` must be 1); ``params.seed`` seeds the rounds.
        agents: None or a :class:`Learner`/adapter name for self-play (``adapter`` plays every
            role when None), or ``{role: Learner | Scripted | opponent(name) | adapter name |
            agent}``; a named opponent is looked up on the env (``scripted_opponents``).
        group_ids: the task group of each episode (default: its index).
        turn_timeout_s: limit on each scripted agent call and each env call (None: no limit).
        max_steps: the most env steps per episode (default: the spec's ``max_turns``).
        max_error_rate: the fraction of failed episodes above which :class:`RolloutError` is raised.
        max_context_tokens: a learner's context limit (default: the model's window).
        options: passed to every ``env.reset``.
        renderer: turns observations into tokens (default: ``model.chat_template: auto``).
    """
    if params.n != 1:
        raise ValueError("multi_agent_rollout() samples one action per turn; set params.n = 1 and repeat seeds for groups")
    params.validate()
    t0 = time.perf_counter()
    n = len(seeds)
    if n == 0:
        raise ValueError("multi_agent_rollout() got no seeds; pass one seed per episode")
    group_ids = list(group_ids) if group_ids is not None else list(range(n))
    if len(group_ids) != n:
        raise ValueError(f"group_ids has {len(group_ids)} entries for {n} seeds; give one per episode")
    renderer = renderer or PromptRenderer.from_config(policy.tokenizer, "auto")
    if renderer.extra_eos_ids:
        params = SamplingParams(**{**params.__dict__, "eos_token_ids": (*params.eos_token_ids, *renderer.extra_eos_ids)})
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
    self_play, plan = resolve_agents(agents, adapter, roles, next(e for e in envs if e is not None))
    learner_roles = tuple(r for r in roles if isinstance(plan[r], Learner))
    for r, p in plan.items():
        if isinstance(p, Learner) and p.adapter is not None and p.adapter not in policy.adapter_names:
            raise ValueError(
                f"role {r!r} is played by adapter {p.adapter!r}, which the policy does not have "
                f"(adapters: {policy.adapter_names}); add it with policy.add_adapter({p.adapter!r})"
            )
    spec: EnvSpec | None = next((getattr(e, "env_spec", None) for e in envs if e is not None), None)
    steps_cap = max_steps or (spec.max_turns if spec is not None else DEFAULT_MAX_STEPS)

    sample_pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ma-sample")
    seats: list[EpisodeAgents | None] = [None] * n

    async def run_all() -> Batcher:
        batcher = Batcher(policy, params, live=sum(e is not None for e in envs), executor=sample_pool)

        async def one(i: int) -> None:
            seed = int(seeds[i])
            ea = EpisodeAgents(
                i, seed, roles, plan, batcher, renderer, limit, params.max_new_tokens, turn_timeout_s,
                system_prompt=spec.system_prompt if spec is not None else "",
            )
            seats[i] = ea
            try:
                result = await play_episode_async(
                    GuardedEnv(envs[i], turn_timeout_s),
                    ea.for_coordinator(self_play),
                    seed=seed,
                    options=options,
                    turn_timeout_s=None,  # scripted agents carry the limit themselves (see above)
                    max_steps=steps_cap,
                )
            except EpisodeError as e:
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
        batcher = run_coroutine(run_all)
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
