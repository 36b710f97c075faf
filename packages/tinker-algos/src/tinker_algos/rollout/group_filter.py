"""Dynamic sampling (``rollout.dynamic_sampling``): drop a step's groups that carry no learning
signal and refill the step with groups of fresh prompts.

* :func:`tied_B` -- which groups' rewards all tie (a group-relative advantage is 0 on each);
* :class:`PassRateFilter` -- the difficulty filter: per prompt (its first observation), the
  successes of its last ``window`` episodes; a group is kept while that recent pass rate is
  strictly between 0 and 1. Its memory is state: it travels in the stage's checkpoint;
* :func:`collect_filtered` -- round 0 is the step's usual batch; while fewer than
  ``prompts_per_step`` groups are kept and rounds remain, round ``r`` samples fresh prompts (task
  seeds derived from ``(seed, stage, step, "refill", r)``, so a resumed run refills exactly as an
  uninterrupted one): as many as the missing groups need at the share of groups kept so far
  (:func:`refill_size`), at most ``prompts_per_step``; the kept groups, in round order, the first
  ``prompts_per_step`` of them, are the step's batch.

Logged (``sampling/*``): ``tied_frac`` (groups of round 0 whose rewards all tie), ``dropped_frac``
(groups not trained on over all rounds), ``rounds`` (extra rounds run), ``refill_episodes`` (what
the refill cost in episodes; ``time/refill_s`` in seconds), ``kept_groups`` and ``short_groups``
(missing after the last round).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tinker_algos.rollout.episodes import Episode, RolloutResult
from tinker_core.config import DynamicSamplingConfig


def group_episodes(result: RolloutResult) -> list[list[Episode]]:
    """The episodes of each group (task) of ``result``, failed ones left out, in task order."""
    n = max((e.group for e in result.episodes), default=-1) + 1
    out: list[list[Episode]] = [[] for _ in range(n)]
    for e in result.episodes:
        if e.error is None:
            out[e.group].append(e)
    return out


def tied_B(rewards_by_group: Sequence[Sequence[float]]) -> list[bool]:
    """For each group, whether its rewards all tie (an empty group counts as tied: no signal)."""
    return [len(r) == 0 or float(np.ptp(np.asarray(r, dtype=np.float64))) == 0.0 for r in rewards_by_group]


def prompt_key(episode: Episode) -> str:
    """A prompt's identity: the SHA-1 of its episode's first observation (the same task text in
    another step is the same prompt)."""
    first = episode.transcript[0][0] if episode.transcript else ""
    return hashlib.sha1(str(first).encode("utf-8")).hexdigest()


class PassRateFilter:
    """The difficulty filter: keep a group while its prompt's recent pass rate is in (0, 1).

    ``history[prompt]`` holds the successes (1/0) of the prompt's last ``window`` episodes; the
    ``max_prompts`` most recently seen prompts are remembered."""

    def __init__(self, window: int, max_prompts: int) -> None:
        self.window = window
        self.max_prompts = max_prompts
        self.history: OrderedDict[str, list[int]] = OrderedDict()

    def keep(self, groups: list[list[Episode]]) -> list[bool]:
        out = []
        for episodes in groups:
            if not episodes:
                out.append(False)
                continue
            key = prompt_key(episodes[0])
            seen = self.history.pop(key, []) + [int(bool(e.success)) for e in episodes]
            self.history[key] = seen[-self.window:]
            while len(self.history) > self.max_prompts:
                self.history.popitem(last=False)
            rate = float(np.mean(self.history[key]))
            out.append(0.0 < rate < 1.0)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"history": [[k, list(v)] for k, v in self.history.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = OrderedDict((k, list(v)) for k, v in state.get("history", []))


class GroupFilter:
    """The stage's group filter (``rollout.dynamic_sampling``): ``tied`` or ``pass_rate``."""

    def __init__(self, cfg: DynamicSamplingConfig) -> None:
        self.cfg = cfg
        self.pass_rate = PassRateFilter(cfg.window, cfg.max_prompts) if cfg.filter == "pass_rate" else None

    def keep(self, groups: list[list[Episode]]) -> list[bool]:
        if self.pass_rate is not None:
            return self.pass_rate.keep(groups)
        return [not t for t in tied_B([[e.reward for e in g] for g in groups])]

    def state_dict(self) -> dict[str, Any]:
        return {"group_filter": self.pass_rate.state_dict()} if self.pass_rate is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.pass_rate is not None:
            self.pass_rate.load_state_dict(state.get("group_filter", {}))


def merge_groups(parts: list[tuple[RolloutResult, list[int]]]) -> RolloutResult:
    """One result holding the listed groups of each part, renumbered 0.. in order; the parts'
    errors, sampled tokens and seconds add up."""
    episodes: list[Episode] = []
    errors: Counter[str] = Counter()
    tokens, seconds = 0, 0.0
    g_new = 0
    for result, keep in parts:
        by_group: dict[int, list[Episode]] = {}
        for e in result.episodes:
            by_group.setdefault(e.group, []).append(e)
        for g in keep:
            for e in by_group.get(g, []):
                traj = dataclasses.replace(e.trajectory, group_id=g_new) if e.trajectory is not None else None
                episodes.append(dataclasses.replace(e, group=g_new, trajectory=traj))
            g_new += 1
        errors.update(result.errors)
        tokens += result.new_tokens
        seconds += result.seconds
    return RolloutResult(episodes, errors, tokens, seconds)


def refill_size(missing: int, kept: int, sampled: int, most: int) -> int:
    """Prompts a refill round samples: ``ceil(missing / (kept / sampled))`` (the share kept so far,
    at least ``1 / most``), at most ``most``."""
    rate = max(kept / max(sampled, 1), 1.0 / most)
    return min(most, math.ceil(missing / rate - 1e-9))


def collect_filtered(
    first: RolloutResult, refill: Callable[[int, int], RolloutResult], group_filter: GroupFilter, want: int, max_rounds: int
) -> tuple[RolloutResult, dict[str, float]]:
    """The step's batch after dynamic sampling (see the module docstring): ``first`` is round 0,
    ``refill(r, n)`` samples round ``r`` (``1 <= r <= max_rounds``) of ``n`` prompts; ``want``
    groups are the target."""
    groups = group_episodes(first)
    tied = tied_B([[e.reward for e in g] for g in groups])
    kept = [g for g, k in enumerate(group_filter.keep(groups)) if k]
    parts = [(first, kept[:want])]
    n_kept, sampled, rounds, refill_episodes, t0 = len(kept), len(groups), 0, 0, time.perf_counter()
    while n_kept < want and rounds < max_rounds:
        rounds += 1
        more = refill(rounds, refill_size(want - n_kept, n_kept, sampled, want))
        more_groups = group_episodes(more)
        keep = [g for g, k in enumerate(group_filter.keep(more_groups)) if k][: want - n_kept]
        parts.append((more, keep))
        n_kept += len(keep)
        sampled += len(more_groups)
        refill_episodes += len(more.episodes)
    refill_s = time.perf_counter() - t0 if rounds else 0.0
    metrics = {
        "sampling/tied_frac": float(np.mean(tied)) if tied else 0.0,
        "sampling/dropped_frac": 1.0 - min(n_kept, want) / max(sampled, 1) if sampled else 0.0,
        "sampling/rounds": float(rounds),
        "sampling/refill_episodes": float(refill_episodes),
        "time/refill_s": refill_s,
        "sampling/kept_groups": float(min(n_kept, want)),
        "sampling/short_groups": float(max(want - n_kept, 0)),
    }
    return merge_groups(parts), metrics
