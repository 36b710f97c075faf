"""Rollouts: episodes of a policy in text environments, through tinker-core's turn FSM.

:func:`rollout` runs many episodes at once. Each turn, every unfinished episode's context (all
tokens so far) is sampled in one batch; the action text goes to its env as a
:class:`tinker_core.env.Action` (a ``str`` carrying how the turn ended); the env's observation
is appended as masked ``INTERACTING`` tokens; each episode's KV cache is kept from one turn to the
next (:mod:`tinker_algos.sampling.turn_cache`), so a turn prefills only what was added since. Only the policy's tokens (``GENERATING``) carry
loss weight, so the gradient at prompt and environment positions is exactly zero.

Observations become tokens through a :class:`tinker_algos.model.prompts.PromptRenderer` (the chat
template of ``model.chat_template``; default ``auto``): the first one with the system prompt
(the job's ``env.system_prompt`` the renderer carries, else the env spec's), later ones as
template deltas appended after the tokens the policy sampled, which are kept exactly as sampled.

An env that raises or times out ends its episode with an error, counted per reason
(``env_error``, ``env_timeout``, ``context_overflow``); the episode is left out of training.
Above ``max_error_rate`` the whole rollout fails with :class:`RolloutError`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from tinker_algos.model.models import PolicyModel
from tinker_algos.model.prompts import Conversation, PromptRenderer, TemplateError
from tinker_algos.records.recording import UNTEMPERED, observation_text, phase, record_eval
from tinker_algos.sampling.engine import HFEngine
from tinker_algos.sampling.sampler import TURN_END_OF, SampledSequence, SamplingParams
from tinker_algos.sampling.turn_cache import TurnCache
from tinker_core.contracts import (
    Action,
    Batch,
    Episode,
    Observation,
    StepResult,
    Trajectory,
    TrajectoryGroup,
)
from tinker_core.errors import OpenTinkerError
from tinker_core.fsm import TurnFSM, TurnState
from tinker_core.timeouts import CallRunner
from tinker_core.tools import parse_tool_calls

if TYPE_CHECKING:
    from tinker_core.config import EnvConfig
    from tinker_core.engines import RolloutEngine
    from tinker_core.env import TextEnv


class RolloutError(OpenTinkerError, RuntimeError):
    """Too many episodes failed (env errors, timeouts) in one rollout."""


@dataclass
class RolloutResult:
    """What :func:`rollout` returns: its episodes (task after task), the error counts, the number
    of sampled tokens and the time it took; :attr:`groups`, :meth:`batch` and :meth:`metrics`
    are read from them."""

    episodes: list[Episode]
    errors: Counter[str]
    new_tokens: int
    seconds: float

    @property
    def trajectories(self) -> list[Trajectory]:
        return [e.trajectory for e in self.episodes if e.trajectory is not None]

    @property
    def groups(self) -> list[TrajectoryGroup]:
        """One :class:`TrajectoryGroup` per task, in task order: the trajectories of its episodes
        that did not fail (a group whose every episode failed is empty)."""
        n_tasks = max((e.group for e in self.episodes), default=-1) + 1
        groups = [TrajectoryGroup([]) for _ in range(n_tasks)]
        for e in self.episodes:
            if e.trajectory is not None:
                groups[e.group].trajectories.append(e.trajectory)
        return groups

    def batch(self, pad_token_id: int = 0) -> Batch:
        """The training batch: :meth:`Batch.from_groups` of :attr:`groups` (rows group after group)."""
        return Batch.from_groups(self.groups, pad_token_id)

    def metrics(self, prefix: str = "env") -> dict[str, float]:
        ok = [e for e in self.episodes if e.error is None]
        out: dict[str, float] = {
            f"{prefix}/reward_mean": float(np.mean([e.reward for e in ok])) if ok else 0.0,
            f"{prefix}/success_rate": float(np.mean([e.success for e in ok])) if ok else 0.0,
            f"{prefix}/turns_mean": float(np.mean([e.turns for e in ok])) if ok else 0.0,
            f"{prefix}/truncated_rate": float(np.mean([e.truncated for e in ok])) if ok else 0.0,
            "rollout/episodes": float(len(self.episodes)),
            "rollout/new_tokens": float(self.new_tokens),
            "rollout/error_rate": (len(self.episodes) - len(ok)) / max(len(self.episodes), 1),
            "rollout/tokens_per_s": self.new_tokens / max(self.seconds, 1e-9),
        }
        for reason, n in sorted(self.errors.items()):
            out[f"rollout/errors/{reason}"] = float(n)
        tokens = sum(e.entropy_tokens for e in ok)
        if tokens:
            out["policy/entropy"] = sum(e.entropy_sum for e in ok) / tokens
        return out


FirstPrompts = dict[tuple[str, str, str], tuple[list[int], Conversation]]
"""``(observation, system prompt, tools as JSON) -> (ids, conversation)``: a task's first prompt, encoded once per rollout."""


class PolicyTurns:
    """One policy's side of one episode (a single-agent episode, or one learner role of a
    multi-agent one): its turn FSM (tokens, loss mask, sampler logprobs), its chat so far, its
    last sample and its transcript of ``(observation, action)`` texts. ``tools`` are the env's
    (``EnvSpec.tools``): the renderer shows them to the policy and :meth:`act` parses each sample's
    tool calls into its :class:`Action`.

    Per turn: :meth:`render` the observation, :meth:`observe` its ids (masked), :meth:`act` on
    the sample (trained), :meth:`rewarded` when the env scores the turn; :meth:`finish` at the end.
    """

    def __init__(self, renderer: PromptRenderer, system_prompt: str = "", adapter: str | None = None) -> None:
        self.renderer = renderer
        self.system_prompt = system_prompt
        self.adapter = adapter
        self.fsm = TurnFSM()
        self.conv = Conversation()
        self.last: SampledSequence | None = None
        self.action: Action | None = None  # what the env got for the last sample (its tool calls parsed)
        self.untempered: list[float] = []  # each policy token's raw logprob (temperature 1, unfiltered)
        self.observation_text = ""
        self.transcript: list[tuple[str, str]] = []
        self.tools: tuple[dict[str, Any], ...] = ()
        self.entropy_sum, self.entropy_tokens = 0.0, 0

    def render(self, observation: Observation, first_prompts: FirstPrompts | None = None) -> list[int]:
        """The ids of ``observation``: the first one as the prompt (with the system prompt; text
        prompts looked up in and added to ``first_prompts``), later ones as the template delta
        after the last sample."""
        self.observation_text = observation_text(observation)  # chat messages as role: content lines
        if self.last is not None:
            return self.renderer.next(self.conv, self.last.tokens, self.last.text, observation)
        if first_prompts is None or not isinstance(observation, str):
            ids, self.conv = self.renderer.start(observation, self.system_prompt, self.tools)
            return ids
        key = (observation, self.system_prompt, json.dumps(self.tools, sort_keys=True) if self.tools else "")
        if key not in first_prompts:
            first_prompts[key] = self.renderer.start(observation, self.system_prompt, self.tools)
        ids, conv = first_prompts[key]
        self.conv = Conversation(list(conv.messages), conv.tools)
        return ids

    def observe(self, ids: Sequence[int]) -> None:
        """Append an observation's ids: masked (``PENDING`` first, ``INTERACTING`` after)."""
        self.fsm.append(ids)

    def act(self, seq: SampledSequence) -> Action:
        """Record the policy's sample as a ``GENERATING`` turn; the action the env gets."""
        self.fsm.transition(TurnState.GENERATING)
        self.fsm.append(seq.tokens, logprobs=seq.logprobs)
        self.untempered.extend(seq.raw_logprobs)
        self.fsm.transition(TurnState.INTERACTING)
        self.last = seq
        self.entropy_sum += float(sum(seq.entropies))
        self.entropy_tokens += len(seq.entropies)
        if not self.tools:
            self.action = Action(seq.text, TURN_END_OF[seq.stop_reason])
        else:
            calls, errors = parse_tool_calls(seq.text, self.tools)
            self.action = Action(seq.text, TURN_END_OF[seq.stop_reason], calls, errors)
        return self.action

    def rewarded(self, reward: float) -> None:
        """The env's reward for the last action; the turn goes into the transcript (the action as
        the env got it: a record shows the tool calls the env was given)."""
        self.fsm.end_turn(reward)
        self.transcript.append((self.observation_text, self.action if self.action is not None else ""))

    def finish(self, group_id: int, **info: object) -> Trajectory:
        """End the episode; its trajectory (turns without a reward get 0; ``info["stop_reason"]``:
        how the last sample ended)."""
        self.fsm.transition(TurnState.TERMINATED)
        if self.last is not None:
            info.setdefault("stop_reason", self.last.stop_reason)
        traj = self.fsm.to_trajectory(group_id=group_id, **info)
        policy_T = traj.loss_mask_T > 0
        if int(policy_T.sum()) == len(self.untempered):  # what records show: greedy's sampler logprobs are all 0
            untempered_T = np.zeros_like(traj.sampler_logprobs_T)
            untempered_T[policy_T] = self.untempered
            traj.info[UNTEMPERED] = untempered_T
        return traj


@dataclass
class _Live:
    """One single-agent episode while it runs: its task, env, policy turns and (once over) result."""

    group: int
    seed: int
    turns: PolicyTurns
    env: Any = None
    reward: float = 0.0
    done: Episode | None = None


def _env_error(error: BaseException) -> str:
    """The error reason of a failed env call (a ``BaseException`` that is no ``Exception`` is re-raised)."""
    if isinstance(error, cf.TimeoutError):
        return "env_timeout"
    if isinstance(error, Exception):
        return "env_error"
    raise error


def context_limit(policy: PolicyModel, max_context_tokens: int | None) -> int:
    """The most tokens an episode's context may hold: ``max_context_tokens``, else the model's window."""
    return int(max_context_tokens or getattr(policy.base_model.config, "max_position_embeddings", None) or 10**9)


class _Rollout:
    """The state of one :func:`rollout` call: its episodes, its env-call runner, its counters."""

    def __init__(
        self, policy: PolicyModel, params: SamplingParams, renderer: PromptRenderer, runner: CallRunner,
        adapter: str | None, limit: int, reuse_kv_cache: bool = True, engine: RolloutEngine | None = None,
    ) -> None:
        self.policy, self.params, self.renderer, self.runner = policy, params, renderer, runner
        self.adapter, self.limit = adapter, limit
        self.kv = TurnCache() if reuse_kv_cache else None  # per episode (its id): the KV of its conversation so far
        self.episodes: list[_Live] = []
        self.errors: Counter[str] = Counter()
        self.new_tokens = 0
        self.first_prompts: FirstPrompts = {}
        self.engine: Any = engine if engine is not None else HFEngine(policy)  # default: the in-process sampler

    def fail(self, ep: _Live, reason: str) -> None:
        self.errors[reason] += 1
        if self.kv is not None:
            self.kv.drop(id(ep))
        ep.done = Episode(None, 0.0, ep.turns.fsm.num_turns, False, reason, ep.turns.transcript, group=ep.group)

    def active(self) -> list[_Live]:
        return [ep for ep in self.episodes if ep.done is None]

    def start(self, env_factory: Callable[[], TextEnv], seeds: Sequence[int], group_size: int) -> None:
        """Build one env per episode and reset it with its task's seed; render the first prompts."""
        for group, seed in enumerate(seeds):
            for _ in range(group_size):
                ep = _Live(group, int(seed), PolicyTurns(self.renderer))
                self.episodes.append(ep)
                try:
                    ep.env = env_factory()
                except Exception:
                    self.fail(ep, "env_error")
        made = self.active()
        with phase("env"):
            resets = self.runner.map([partial(ep.env.reset, seed=ep.seed) for ep in made])
        for ep, (value, error) in zip(made, resets, strict=True):
            if error is not None:
                self.fail(ep, _env_error(error))
                continue
            try:
                obs, _info = value
                spec = getattr(ep.env, "env_spec", None)
                ep.turns.system_prompt = getattr(spec, "system_prompt", "") or ""
                ep.turns.tools = tuple(getattr(spec, "tools", ()) or ())
                ep.turns.observe(ep.turns.render(obs, self.first_prompts))
            except Exception:
                self.fail(ep, "env_error")

    def turn(self, turn: int, last_turn: bool, top_reward: float) -> bool:
        """Sample every running episode's action and step its env; False when none was running."""
        for ep in self.active():
            if ep.turns.fsm.num_tokens + self.params.max_new_tokens > self.limit:
                self.fail(ep, "context_overflow")
        active = self.active()
        if not active:
            return False
        params = self.params
        turn_params = dataclasses.replace(params, seed=None if params.seed is None else params.seed + turn)
        with phase("sample"):
            samples = self.engine.generate(
                [ep.turns.fsm.tokens for ep in active], turn_params, adapter=self.adapter,
                turn_cache=self.kv, cache_keys=[id(ep) for ep in active], store_cache=not last_turn,
            )
        actions = []
        for ep, outs in zip(active, samples, strict=True):
            actions.append(ep.turns.act(outs[0]))
            self.new_tokens += len(outs[0].tokens)
        with phase("env"):
            steps = self.runner.map([partial(ep.env.step, action) for ep, action in zip(active, actions, strict=True)])
        for ep, (value, error) in zip(active, steps, strict=True):
            if error is not None:
                self.fail(ep, _env_error(error))
                continue
            self.after_step(ep, value, last_turn, top_reward)
        if self.kv is not None:
            for ep in active:
                if ep.done is not None:  # ended: its cache is freed now
                    self.kv.drop(id(ep))
        return True

    def after_step(self, ep: _Live, value: Any, last_turn: bool, top_reward: float) -> None:
        """Record a step's reward; end the episode, or append the env's next observation."""
        try:
            step = StepResult.of(value)
        except Exception:
            self.fail(ep, "env_error")  # not a (obs, reward, terminated, truncated, info) tuple
            return
        ep.turns.rewarded(step.reward)
        ep.reward += step.reward
        if step.terminated or step.truncated or last_turn:
            traj = ep.turns.finish(group_id=ep.group)
            truncated = bool(step.truncated or (last_turn and not step.terminated))
            ep.done = Episode(traj, ep.reward, ep.turns.fsm.num_turns, step.reward >= top_reward - 1e-9, None, ep.turns.transcript, truncated,
                              ep.group, ep.turns.entropy_sum, ep.turns.entropy_tokens)
            return
        try:
            ids = ep.turns.render(step.observation)
        except TemplateError:
            raise
        except Exception:
            self.fail(ep, "env_error")  # an observation the template cannot render
            return
        ep.turns.observe(ids)

    def close(self) -> None:
        if self.kv is not None:
            self.kv.clear()
        self.runner.close()
        for ep in self.episodes:
            if ep.env is not None:
                with contextlib.suppress(Exception):  # a broken env must not hide the result
                    ep.env.close()


def rollout(
    policy: PolicyModel,
    env_factory: Callable[[], TextEnv],
    seeds: Sequence[int],
    params: SamplingParams,
    *,
    group_size: int = 1,
    max_turns: int | None = None,
    adapter: str | None = None,
    turn_timeout_s: float | None = None,
    max_error_rate: float = 1.0,
    max_context_tokens: int | None = None,
    renderer: PromptRenderer | None = None,
    reuse_kv_cache: bool = True,
    engine: RolloutEngine | None = None,
) -> RolloutResult:
    """Run ``group_size`` episodes per task seed (``params.n`` must be 1).

    ``seeds[k]`` seeds the ``env.reset`` of task ``k``'s episodes, which pose the same task and
    form group ``k`` (:attr:`RolloutResult.groups`); episodes come task after task.
    ``params.seed`` seeds sampling; each turn uses ``params.seed + turn``.
    ``renderer`` turns observations into tokens (default: ``model.chat_template: auto``).
    ``turn_timeout_s`` limits each env call; the calls of a turn (all resets, then all steps)
    run in order in one pooled worker thread (:class:`tinker_core.timeouts.CallRunner`), or
    inline with ``None``.
    ``reuse_kv_cache`` keeps each episode's KV cache from one turn to the next, so a turn prefills
    only the tokens added since (:mod:`tinker_algos.sampling.turn_cache`); False prefills the whole
    conversation every turn (the same tokens and logprobs, up to float rounding).
    ``engine`` samples (the job's ``rollout.engine``, :mod:`tinker_core.engines`); default: the
    in-process sampler on ``policy`` (:class:`~tinker_algos.sampling.engine.HFEngine`).
    """
    if params.n != 1:
        raise ValueError("rollout() samples one action per episode per turn; set params.n = 1 and use group_size for groups")
    if group_size < 1:
        raise ValueError(f"rollout(): group_size must be >= 1, got {group_size}")
    t0 = time.perf_counter()
    renderer = renderer or PromptRenderer.from_config(policy.tokenizer, "auto")
    params = dataclasses.replace(params, eos_token_ids=(*params.eos_token_ids, *renderer.extra_eos_ids))
    runner = CallRunner(turn_timeout_s, name="opentinker-env", message=f"env call took longer than {turn_timeout_s} s")
    run = _Rollout(policy, params, renderer, runner, adapter, context_limit(policy, max_context_tokens), reuse_kv_cache, engine)
    try:
        run.start(env_factory, seeds, group_size)
        spec = getattr(run.episodes[0].env, "env_spec", None) if run.episodes else None  # the first episode's env
        top_reward = float(spec.reward_range[1]) if spec is not None else 1.0
        turn_cap = max_turns or (spec.max_turns if spec is not None else 1)
        for turn in range(turn_cap):
            if not run.turn(turn, turn == turn_cap - 1, top_reward):
                break
    finally:
        run.close()
    done = [ep.done for ep in run.episodes if ep.done is not None]
    n = len(run.episodes)
    assert len(done) == n
    failed = sum(run.errors.values())
    if failed / max(n, 1) > max_error_rate:
        raise RolloutError(
            f"{failed} of {n} episodes failed ({dict(run.errors)}), above "
            f"rollout.max_error_rate={max_error_rate}; fix the environment or raise the limit"
        )
    return RolloutResult(done, run.errors, run.new_tokens, time.perf_counter() - t0)


def evaluate(
    policy: PolicyModel,
    env_factory: Callable[[], TextEnv],
    num_episodes: int,
    *,
    seed: int,
    max_new_tokens: int,
    stop: Sequence[str] = ("\n",),
    max_turns: int | None = None,
    adapter: str | None = None,
    renderer: PromptRenderer | None = None,
    reuse_kv_cache: bool = True,
    temperature: float = 0.0,
) -> dict[str, float]:
    """Held-out evaluation, greedy (or sampled at ``temperature``, seeded by ``seed``):
    ``eval/accuracy`` (episodes reaching the top reward) and more."""
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, stop=tuple(stop), seed=seed)
    seeds = [seed + i for i in range(num_episodes)]
    result = rollout(
        policy, env_factory, seeds, params, max_turns=max_turns, adapter=adapter, renderer=renderer, reuse_kv_cache=reuse_kv_cache
    )
    record_eval(result, policy.tokenizer)  # the transcripts, when a run records them (tinker_algos.records.recording)
    m = result.metrics(prefix="eval")
    return {
        "eval/accuracy": m["eval/success_rate"],
        "eval/reward_mean": m["eval/reward_mean"],
        "eval/turns_mean": m["eval/turns_mean"],
        "eval/error_rate": m["rollout/error_rate"],
    }


def make_env(env: EnvConfig, kwargs: dict[str, Any]) -> Any:
    """An env of the section ``env``: served from ``env.address``, or built in this process."""
    return env_builder(env, kwargs)()


def env_builder(env: EnvConfig, kwargs: dict[str, Any]) -> Callable[[], Any]:
    """A zero-argument builder of the section's env, its kind decided once: a client of the env
    served at ``env.address``, or the registered env (looked up once, not per episode)."""
    if env.address:
        from tinker_core.remote import RemoteEnv

        return partial(RemoteEnv, env.address, env.id, **kwargs)
    import tinker_core

    return tinker_core.env_factory(env.id, **kwargs)


def env_factories(env: EnvConfig | None) -> tuple[Callable[[], Any] | None, Callable[[], Any] | None]:
    """``(train, eval)`` env factories of a stage (``eval_kwargs`` default to ``kwargs``); None without an env."""
    if env is None:
        return None, None
    eval_kwargs = env.eval_kwargs if env.eval_kwargs is not None else env.kwargs
    return env_builder(env, dict(env.kwargs)), env_builder(env, dict(eval_kwargs))
