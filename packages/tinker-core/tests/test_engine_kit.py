"""The rollout-engine conformance kit on a pure-Python engine: it passes, and each broken variant
fails the check that names what broke."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tinker_core.engines import EngineError, EngineHealth, Generation, check_pause_mode
from tinker_core.testing import ConformanceError, StepHold, check_rollout_engine


class CountingEngine:
    """Samples ``(last + k) % 50`` tokens with a seeded RNG; logprob -1 per token (0 greedy)."""

    name = "counting"

    def __init__(self) -> None:
        self.version: int | None = None
        self.cond = threading.Condition()
        self.paused: str | None = None
        self.in_flight = self.held = 0
        self.hook: Any = None

    def generate(self, prompts: Any, params: Any, *, adapter: str | None = None, **hints: Any) -> list[list[Generation]]:
        with self.cond:
            self.cond.wait_for(lambda: self.paused is None)
            self.in_flight += 1
        try:
            out = []
            for pi, prompt in enumerate(prompts):
                rng = random.Random(params.seed if params.seed is not None else 0)
                row = []
                for si in range(params.n):
                    tokens: list[int] = []
                    reason = "length"
                    for step in range(params.max_new_tokens):
                        tokens.append((prompt[-1] + (0 if params.temperature == 0 else rng.randrange(1, 5)) + step) % 50)
                        if step + 1 < params.max_new_tokens and self.gate():
                            reason = "abort"
                            break
                    lp = [-1.0] * len(tokens)
                    row.append(Generation(list(prompt), tokens, [0.0] * len(lp) if params.temperature == 0 else lp, lp, reason,
                                          prompt_index=pi, sample_index=si))
                out.append(row)
            return out
        finally:
            with self.cond:
                self.in_flight -= 1
                self.cond.notify_all()

    def gate(self) -> bool:
        if self.hook is not None:
            self.hook()
        with self.cond:
            if self.paused == "keep":
                self.held += 1
                self.cond.notify_all()
                self.cond.wait_for(lambda: self.paused != "keep")
                self.held -= 1
            return self.paused == "abort"

    def init_weight_transfer(self) -> None: ...

    def start_weight_update(self, version: int) -> None:
        if self.version is not None and version <= self.version:
            raise EngineError("backwards")

    def update_weights(self, update: Any) -> None: ...

    def finish_weight_update(self, version: int) -> None:
        self.version = version

    def pause(self, mode: str = "wait") -> None:
        mode = check_pause_mode(mode)
        with self.cond:
            self.paused = mode
            self.cond.notify_all()
            self.cond.wait_for(lambda: (self.held == self.in_flight) if mode == "keep" else self.in_flight == 0)

    def resume(self) -> None:
        with self.cond:
            self.paused = None
            self.cond.notify_all()

    def health(self) -> EngineHealth:
        return EngineHealth(ok=True, weight_version=self.version, paused=self.paused, in_flight=self.in_flight)

    def close(self) -> None: ...


PROMPTS = [[1, 2, 3], [7]]


@contextlib.contextmanager
def hold(engine: CountingEngine) -> Iterator[StepHold]:
    h = StepHold()
    engine.hook = h.at_step
    try:
        yield h
    finally:
        engine.hook = None


def test_a_conforming_engine_passes_and_a_missing_hold_is_reported():
    engine = CountingEngine()
    assert check_rollout_engine(engine, PROMPTS, hold=lambda: hold(engine)) == []
    assert check_rollout_engine(CountingEngine(), PROMPTS) == [
        "pause-in-flight: no hold given (a call cannot be made to be in flight deterministically)"
    ]


class NoVersion(CountingEngine):
    def finish_weight_update(self, version: int) -> None: ...


class IgnoresPause(CountingEngine):
    def pause(self, mode: str = "wait") -> None:
        check_pause_mode(mode)
        self.paused = mode

    def generate(self, prompts: Any, params: Any, **kw: Any) -> Any:
        with self.cond:
            paused, self.paused = self.paused, None
        try:
            return super().generate(prompts, params, **kw)
        finally:
            with self.cond:
                self.paused = paused


class LosesALogprob(CountingEngine):
    def generate(self, prompts: Any, params: Any, **kw: Any) -> Any:
        out = super().generate(prompts, params, **kw)
        out[0][0].raw_logprobs.pop()
        return out


class AbortsLikeWait(CountingEngine):
    def gate(self) -> bool:
        super().gate()
        return False


@pytest.mark.parametrize(("engine", "check", "hint"), [
    (LosesALogprob(), "generate-shape", "one sampled and one raw logprob per generated token"),
    (NoVersion(), "weight-version", "set the version in finish_weight_update"),
    (IgnoresPause(), "pause", "hold new calls until resume"),
    (AbortsLikeWait(), "pause-in-flight (abort)", "stop reason 'abort'"),
], ids=lambda x: x if isinstance(x, str) else type(x).__name__)
def test_each_broken_engine_fails_the_check_that_names_it(engine, check, hint):
    with pytest.raises(ConformanceError) as info:
        check_rollout_engine(engine, PROMPTS, hold=lambda: hold(engine))
    assert info.value.check == check and hint in str(info.value)
