"""Rollouts: episodes of a policy in text environments, through tinker-core's turn FSM.

:func:`rollout` runs many episodes at once. Each turn, every unfinished episode's context (all
tokens so far) is sampled in one batch; the action text goes to its env as a
:class:`tinker_core.env.Action` (a ``str`` carrying how the turn ended); the env's observation
is appended as masked ``INTERACTING`` tokens. Only the policy's tokens (``GENERATING``) carry
loss weight, so the gradient at prompt and environment positions is exactly zero.

Observations become tokens through a :class:`tinker_algos.prompts.PromptRenderer` (the chat
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
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from tinker_algos.models import PolicyModel
from tinker_algos.prompts import Conversation, PromptRenderer, TemplateError
from tinker_algos.sampler import TURN_END_OF, SamplingParams, sample
from tinker_core.contracts import Trajectory
from tinker_core.env import Action
from tinker_core.errors import OpenTinkerError
from tinker_core.fsm import TurnFSM, TurnState
from tinker_core.timeouts import CallRunner


class RolloutError(OpenTinkerError, RuntimeError):
    """Too many episodes failed (env errors, timeouts) in one rollout."""


@dataclass
class Episode:
    """One finished episode: its trajectory (None when it failed) and what happened."""

    trajectory: Trajectory | None
    reward: float
    turns: int
    success: bool
    error: str | None = None
    transcript: list[tuple[str, str]] = field(default_factory=list)  # (observation, action)
    truncated: bool = False


@dataclass
class RolloutResult:
    episodes: list[Episode]
    errors: Counter[str]
    new_tokens: int
    seconds: float

    @property
    def trajectories(self) -> list[Trajectory]:
        return [e.trajectory for e in self.episodes if e.trajectory is not None]

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
        return out


def _env_error(error: BaseException) -> str:
    """The error reason of a failed env call (a ``BaseException`` that is no ``Exception`` is re-raised)."""
    if isinstance(error, cf.TimeoutError):
        return "env_timeout"
    if isinstance(error, Exception):
        return "env_error"
    raise error


def rollout(
    policy: PolicyModel,
    env_factory: Callable[[], Any],
    seeds: Sequence[int],
    params: SamplingParams,
    *,
    group_ids: Sequence[int] | None = None,
    max_turns: int | None = None,
    adapter: str | None = None,
    turn_timeout_s: float | None = None,
    max_error_rate: float = 1.0,
    max_context_tokens: int | None = None,
    renderer: PromptRenderer | None = None,
) -> RolloutResult:
    """Run one episode per seed (``params.n`` must be 1: repeat a seed for a group).

    ``seeds[i]`` seeds episode ``i``'s ``env.reset``; episodes with the same seed pose the same
    task (a GRPO group). ``params.seed`` seeds sampling; each turn uses ``params.seed + turn``.
    ``renderer`` turns observations into tokens (default: ``model.chat_template: auto``).
    ``turn_timeout_s`` limits each env call; the calls of a turn (all resets, then all steps)
    run in order in one pooled worker thread (:class:`tinker_core.timeouts.CallRunner`), or
    inline with ``None``.
    """
    if params.n != 1:
        raise ValueError("rollout() samples one action per episode per turn; set params.n = 1 and repeat seeds for groups")
    t0 = time.perf_counter()
    n = len(seeds)
    group_ids = list(group_ids) if group_ids is not None else list(range(n))
    renderer = renderer or PromptRenderer.from_config(policy.tokenizer, "auto")
    max_pos = getattr(policy.base_model.config, "max_position_embeddings", None)
    limit = max_context_tokens or max_pos or 10**9
    envs: list[Any] = [None] * n
    fsms = [TurnFSM() for _ in range(n)]
    episodes: list[Episode | None] = [None] * n
    rewards = [0.0] * n
    transcripts: list[list[tuple[str, str]]] = [[] for _ in range(n)]
    observations = [""] * n
    convs = [Conversation() for _ in range(n)]
    errors: Counter[str] = Counter()
    new_tokens = 0
    first_prompts: dict[tuple[str, str], tuple[list[int], list[dict[str, str]]]] = {}  # a group's task, encoded once

    def fail(i: int, reason: str) -> None:
        errors[reason] += 1
        episodes[i] = Episode(None, 0.0, fsms[i].num_turns, False, reason, transcripts[i])

    def start(i: int, obs: Any) -> None:
        spec_i = getattr(envs[i], "env_spec", None)
        system = getattr(spec_i, "system_prompt", "") or ""
        key = (obs, system) if isinstance(obs, str) else None
        if key is not None and key in first_prompts:
            ids, messages = first_prompts[key]
            convs[i] = Conversation(list(messages))
        else:
            ids, convs[i] = renderer.start(obs, system)
            if key is not None:
                first_prompts[key] = (ids, list(convs[i].messages))
        observations[i] = renderer.text_of(obs)
        fsms[i].append(ids)

    runner = CallRunner(turn_timeout_s, name="opentinker-env", message=f"env call took longer than {turn_timeout_s} s")
    try:
        for i in range(n):
            try:
                envs[i] = env_factory()
            except Exception:
                fail(i, "env_error")
        made = [i for i in range(n) if episodes[i] is None]
        resets = runner.map([partial(envs[i].reset, seed=int(seeds[i])) for i in made])
        for i, (value, error) in zip(made, resets, strict=True):
            if error is not None:
                fail(i, _env_error(error))
                continue
            try:
                obs, _info = value
                start(i, obs)
            except Exception:
                fail(i, "env_error")
        spec = getattr(envs[0], "env_spec", None) if envs and envs[0] is not None else None
        hi = float(spec.reward_range[1]) if spec is not None else 1.0
        turn_cap = max_turns or (spec.max_turns if spec is not None else 1)
        eos_ids = (*params.eos_token_ids, *renderer.extra_eos_ids)
        for turn in range(turn_cap):
            active = [i for i in range(n) if episodes[i] is None]
            if not active:
                break
            too_long = [i for i in active if fsms[i].num_tokens + params.max_new_tokens > limit]
            for i in too_long:
                fail(i, "context_overflow")
            active = [i for i in active if episodes[i] is None]
            if not active:
                break
            turn_params = dataclasses.replace(
                params, seed=None if params.seed is None else params.seed + turn, eos_token_ids=eos_ids
            )
            samples = sample(policy, [fsms[i].tokens for i in active], turn_params, adapter=adapter)
            seqs = [outs[0] for outs in samples]
            for i, seq in zip(active, seqs, strict=True):
                fsm = fsms[i]
                fsm.transition(TurnState.GENERATING)
                fsm.append(seq.tokens, logprobs=seq.logprobs)
                new_tokens += len(seq.tokens)
                fsm.transition(TurnState.INTERACTING)
            steps = runner.map(
                [partial(envs[i].step, Action(seq.text, TURN_END_OF[seq.stop_reason])) for i, seq in zip(active, seqs, strict=True)]
            )
            last_turn = turn == turn_cap - 1
            for i, seq, (value, error) in zip(active, seqs, steps, strict=True):
                if error is not None:
                    fail(i, _env_error(error))
                    continue
                try:
                    obs, reward, terminated, truncated, _info = value
                    reward = float(reward)
                except Exception:
                    fail(i, "env_error")  # not a (obs, reward, terminated, truncated, info) tuple
                    continue
                fsm = fsms[i]
                fsm.end_turn(reward)
                rewards[i] += reward
                transcripts[i].append((observations[i], seq.text))
                if terminated or truncated or last_turn:
                    fsm.transition(TurnState.TERMINATED)
                    episodes[i] = Episode(
                        fsm.to_trajectory(group_id=int(group_ids[i])),
                        rewards[i],
                        fsm.num_turns,
                        reward >= hi - 1e-9,
                        None,
                        transcripts[i],
                        truncated=bool(truncated or (last_turn and not terminated)),
                    )
                    continue
                try:
                    ids = renderer.next(convs[i], seq.tokens, seq.text, obs)
                except TemplateError:
                    raise
                except Exception:
                    fail(i, "env_error")  # an observation the template cannot render
                    continue
                observations[i] = renderer.text_of(obs)
                fsm.append(ids)
    finally:
        runner.close()
        for e in envs:
            if e is not None:
                with contextlib.suppress(Exception):  # a broken env must not hide the result
                    e.close()
    done = [e for e in episodes if e is not None]
    assert len(done) == n
    result = RolloutResult(done, errors, new_tokens, time.perf_counter() - t0)
    rate = sum(errors.values()) / max(n, 1)
    if rate > max_error_rate:
        raise RolloutError(
            f"{sum(errors.values())} of {n} episodes failed ({dict(errors)}), above "
            f"rollout.max_error_rate={max_error_rate}; fix the environment or raise the limit"
        )
    return result


def evaluate(
    policy: PolicyModel,
    env_factory: Callable[[], Any],
    num_episodes: int,
    *,
    seed: int,
    max_new_tokens: int,
    stop: Sequence[str] = ("\n",),
    max_turns: int | None = None,
    adapter: str | None = None,
    renderer: PromptRenderer | None = None,
) -> dict[str, float]:
    """Greedy held-out evaluation: ``eval/accuracy`` (episodes reaching the top reward) and more."""
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop=tuple(stop), seed=seed)
    seeds = [seed + i for i in range(num_episodes)]
    result = rollout(policy, env_factory, seeds, params, max_turns=max_turns, adapter=adapter, renderer=renderer)
    m = result.metrics(prefix="eval")
    return {
        "eval/accuracy": m["eval/success_rate"],
        "eval/reward_mean": m["eval/reward_mean"],
        "eval/turns_mean": m["eval/turns_mean"],
        "eval/error_rate": m["rollout/error_rate"],
    }
