"""Conformance of rollout engines (:class:`tinker_core.engines.RolloutEngine`).

:func:`check_rollout_engine` exercises an engine through its public methods only:

* ``health`` -- an :class:`~tinker_core.engines.EngineHealth` that says ``ok``;
* ``generate-shape`` -- ``[prompt][sample]`` with ``n`` samples each, every sample its prompt's
  ids, 1..``max_new_tokens`` tokens, one finite logprob <= 0 (sampled and raw) per token, a stop
  reason of :data:`~tinker_core.engines.STOP_REASONS`, ``length`` exactly at ``max_new_tokens``;
* ``length`` -- with ``stop_at_eos=False`` and no stops every sample has ``max_new_tokens`` tokens;
* ``logprobs`` -- at temperature 1 without filters the sampled logprobs are the raw ones;
  greedy (temperature 0) logprobs are 0 and greedy samples repeat;
* ``seed`` -- the same seed gives the same tokens;
* ``hints`` -- an engine ignores generate keywords it does not know;
* ``weight-version`` -- after the four phases of an update ``health()`` reports the new version;
  an update that does not move forward is refused with :class:`~tinker_core.engines.EngineError`;
* ``pause`` -- ``pause`` reports the mode in ``health()``; a call made while paused waits for
  ``resume`` and then samples; an unknown mode is refused;
* ``pause-in-flight`` (with ``hold``) -- a call in flight when the engine pauses ends with stop
  reason ``abort`` (``abort``), runs to its end (``wait``), or is held and, after ``resume``,
  continues to exactly the tokens it samples unpaused (``keep``).

``hold`` makes a call deterministically in flight: a context manager whose value is a
:class:`StepHold` that the engine's decode loop (or the server behind it) passes after each step.
Without it the in-flight checks are skipped, and the report says so. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from tinker_core.testing._common import ConformanceError

__all__ = ["StepHold", "check_rollout_engine"]

WAIT_S = 120.0  # how long a check waits for an engine to reach a state before calling it stuck


class StepHold:
    """A gate for the first generate call that reaches it: :meth:`at_step` (called by the engine
    after a decode step) blocks that call until :meth:`release`; :meth:`wait_held` returns once a
    call is blocked there. Later calls and steps pass freely."""

    def __init__(self) -> None:
        self._held = threading.Event()
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._taken = False

    def at_step(self) -> None:
        with self._lock:
            first = not self._taken
            self._taken = True
        if first:
            self._held.set()
            self._released.wait()

    def wait_held(self, timeout: float = WAIT_S) -> bool:
        return self._held.wait(timeout)

    def release(self) -> None:
        self._released.set()


def _fail(name: str, check: str, problem: str, fix: str = "") -> ConformanceError:
    return ConformanceError(problem, plugin=f"rollout engine {name!r}", check=check, fix=fix)


def _wait_until(pred: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if pred():
            return True
        done.wait(0.01)
    return pred()


class _Call:
    """A generate call on its own thread."""

    def __init__(self, engine: Any, prompts: Any, params: Any) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(engine, prompts, params), daemon=True)
        self.thread.start()

    def _run(self, engine: Any, prompts: Any, params: Any) -> None:
        try:
            self.result = engine.generate(prompts, params)
        except BaseException as e:  # noqa: BLE001 - reported by the check
            self.error = e

    def join(self, name: str, check: str) -> Any:
        self.thread.join(WAIT_S)
        if self.thread.is_alive():
            raise _fail(name, check, f"a generate call did not return within {WAIT_S:g} s", "make pause/resume release it")
        if self.error is not None:
            raise _fail(name, check, f"generate raised {type(self.error).__name__}: {self.error}")
        return self.result


def _check_samples(name: str, check: str, out: Any, prompts: Sequence[Sequence[int]], params: Any, *, abort_ok: bool = False) -> None:
    from tinker_core.engines import STOP_REASONS

    if len(out) != len(prompts):
        raise _fail(name, check, f"{len(prompts)} prompts gave {len(out)} results", "return one list per prompt")
    for i, (prompt, samples) in enumerate(zip(prompts, out, strict=True)):
        if len(samples) != params.n:
            raise _fail(name, check, f"prompt {i} got {len(samples)} samples, not n={params.n}", "return params.n samples per prompt")
        for j, g in enumerate(samples):
            where = f"prompt {i} sample {j}"
            if list(g.prompt_tokens) != list(prompt):
                raise _fail(name, check, f"{where}: prompt_tokens are not the prompt's ids", "echo the prompt ids unchanged")
            n = len(g.tokens)
            if not 1 <= n <= params.max_new_tokens:
                raise _fail(name, check, f"{where}: {n} tokens, max_new_tokens={params.max_new_tokens}")
            if len(g.logprobs) != n or len(g.raw_logprobs) != n:
                raise _fail(name, check, f"{where}: {n} tokens but {len(g.logprobs)} logprobs and {len(g.raw_logprobs)} raw logprobs",
                            "report one sampled and one raw logprob per generated token")
            bad = [x for x in (*g.logprobs, *g.raw_logprobs) if not (math.isfinite(x) and x <= 1e-6)]
            if bad:
                raise _fail(name, check, f"{where}: logprobs must be finite and <= 0, got {bad[:3]}")
            allowed = STOP_REASONS if abort_ok else tuple(r for r in STOP_REASONS if r != "abort")
            if g.stop_reason not in allowed:
                raise _fail(name, check, f"{where}: stop reason {g.stop_reason!r} is not one of {', '.join(allowed)}")
            if g.stop_reason == "length" and n != params.max_new_tokens:
                raise _fail(name, check, f"{where}: stop reason 'length' after {n} of {params.max_new_tokens} tokens")


def check_rollout_engine(
    engine: Any,
    prompts: Sequence[Sequence[int]],
    *,
    update: Callable[[int], Any] | None = None,
    hold: Callable[[], contextlib.AbstractContextManager[StepHold]] | None = None,
    max_new_tokens: int = 6,
) -> list[str]:
    """Check ``engine`` against the contract (see the module docstring); returns the names of
    the checks skipped, each with its reason. ``prompts`` are token-id prompts the engine's model
    accepts; ``update(version)`` builds the :class:`~tinker_core.engines.WeightUpdate` of a
    version (default: ``WeightUpdate(version)``, for engines that share the learner's model);
    ``hold`` makes a call deterministically in flight (see :class:`StepHold`)."""
    from tinker_core.engines import EngineError, EngineHealth, GenerationParams, WeightUpdate

    name = getattr(engine, "name", type(engine).__name__)
    prompts = [list(p) for p in prompts]
    skipped: list[str] = []

    health = engine.health()
    if not isinstance(health, EngineHealth) or not health.ok:
        raise _fail(name, "health", f"health() gave {health!r}", "return EngineHealth(ok=True, ...) when it can serve")

    params = GenerationParams(max_new_tokens=max_new_tokens, n=2, seed=0, temperature=1.0)
    out = engine.generate(prompts, params)
    _check_samples(name, "generate-shape", out, prompts, params)
    for g in (g for samples in out for g in samples):
        if any(abs(a - b) > 1e-4 for a, b in zip(g.logprobs, g.raw_logprobs, strict=True)):
            raise _fail(name, "logprobs", "at temperature 1 without top-k/top-p the sampled logprobs differ from the raw ones",
                        "report log softmax(logits) of the distribution sampled from")

    again = engine.generate(prompts, params)
    if [[g.tokens for g in s] for s in out] != [[g.tokens for g in s] for s in again]:
        raise _fail(name, "seed", "the same seed gave other tokens", "seed the sampler from params.seed")

    length = replace(params, stop_at_eos=False, n=1, max_new_tokens=3)
    out = engine.generate(prompts, length)
    _check_samples(name, "length", out, prompts, length)
    if any(len(s[0].tokens) != 3 or s[0].stop_reason != "length" for s in out):
        raise _fail(name, "length", "with stop_at_eos=False and no stops a sample ended before max_new_tokens",
                    "stop only at eos when stop_at_eos, at stop strings and ids given, or at max_new_tokens")

    greedy = replace(params, temperature=0.0, n=1, seed=None)
    g1, g2 = engine.generate(prompts, greedy), engine.generate(prompts, greedy)
    _check_samples(name, "logprobs", g1, prompts, greedy)
    if any(x != 0.0 for s in g1 for x in s[0].logprobs):
        raise _fail(name, "logprobs", "greedy samples need sampled logprobs of 0 (a point mass)")
    if [s[0].tokens for s in g1] != [s[0].tokens for s in g2]:
        raise _fail(name, "logprobs", "two greedy calls gave other tokens")

    try:
        engine.generate(prompts[:1], greedy, opentinker_unknown_hint=1)
    except TypeError as e:
        raise _fail(name, "hints", f"generate refused an unknown keyword: {e}", "accept **hints and ignore the ones you do not know") from e

    _check_versions(engine, name, update or (lambda v: WeightUpdate(v)), EngineError)
    _check_pause(engine, name, prompts, greedy, EngineError)
    if hold is None:
        skipped.append("pause-in-flight: no hold given (a call cannot be made to be in flight deterministically)")
    else:
        _check_in_flight(engine, name, prompts, hold)
    return skipped


def _check_versions(engine: Any, name: str, update: Callable[[int], Any], engine_error: type[Exception]) -> None:
    engine.init_weight_transfer()
    held = engine.health().weight_version
    version = (held if held is not None else 0) + 1
    engine.start_weight_update(version)
    engine.update_weights(update(version))
    engine.finish_weight_update(version)
    if engine.health().weight_version != version:
        raise _fail(name, "weight-version", f"after the update to v{version} health() reports v{engine.health().weight_version}",
                    "set the version in finish_weight_update")
    try:
        engine.start_weight_update(version)
    except engine_error:
        pass
    else:
        raise _fail(name, "weight-version", f"start_weight_update(v{version}) at v{version} was accepted",
                    "refuse an update that does not move forward with EngineError")


def _check_pause(engine: Any, name: str, prompts: Any, params: Any, engine_error: type[Exception]) -> None:
    try:
        engine.pause("sleep")
    except engine_error:
        pass
    else:
        raise _fail(name, "pause", "pause('sleep') was accepted", "refuse modes other than abort, wait, keep with EngineError")
    expected = engine.generate(prompts[:1], params)
    engine.pause("wait")
    try:
        if engine.health().paused != "wait":
            raise _fail(name, "pause", f"after pause('wait') health().paused is {engine.health().paused!r}")
        call = _Call(engine, prompts[:1], params)
        call.thread.join(0.2)
        if not call.thread.is_alive():
            raise _fail(name, "pause", "a generate call made while paused returned before resume()",
                        "hold new calls until resume")
    finally:
        engine.resume()
    got = call.join(name, "pause")
    if [s[0].tokens for s in got] != [s[0].tokens for s in expected]:
        raise _fail(name, "pause", "a call held by a pause sampled other tokens after resume")
    if engine.health().paused is not None:
        raise _fail(name, "pause", "after resume() health().paused is still set")


def _check_in_flight(engine: Any, name: str, prompts: Any, hold: Callable[[], contextlib.AbstractContextManager[StepHold]]) -> None:
    from tinker_core.engines import GenerationParams

    params = GenerationParams(max_new_tokens=12, temperature=1.0, seed=7, stop_at_eos=False, n=1)
    unpaused = engine.generate(prompts[:1], params)[0][0].tokens
    for mode in ("abort", "wait", "keep"):
        check = f"pause-in-flight ({mode})"
        with _held_call(engine, name, check, prompts[:1], params, hold) as (call, h):
            pauser = threading.Thread(target=engine.pause, args=(mode,), daemon=True)
            pauser.start()
            if not _wait_until(lambda m=mode: engine.health().paused == m):
                raise _fail(name, check, f"health().paused never became {mode!r}")
            h.release()
            if mode == "keep":
                pauser.join(WAIT_S)
                if pauser.is_alive():
                    raise _fail(name, check, "pause('keep') did not return once the call in flight was held")
                if not call.thread.is_alive():
                    raise _fail(name, check, "a call held by pause('keep') returned before resume()")
            pauser.join(WAIT_S)
            if pauser.is_alive():
                raise _fail(name, check, f"pause({mode!r}) did not return", "return once nothing is sampling")
            engine.resume()
            out = call.join(name, check)
        _check_samples(name, check, out, prompts[:1], params, abort_ok=True)
        g = out[0][0]
        if mode == "abort" and (g.stop_reason != "abort" or len(g.tokens) >= params.max_new_tokens):
            raise _fail(name, check, f"the call in flight ended with {g.stop_reason!r} after {len(g.tokens)} tokens",
                        "end calls in flight at once with stop reason 'abort'")
        if mode in ("wait", "keep") and list(g.tokens) != list(unpaused):
            raise _fail(name, check, f"the call in flight sampled {g.tokens}, unpaused it samples {unpaused}",
                        "let 'wait' finish calls in flight and 'keep' continue them where they were")


@contextlib.contextmanager
def _held_call(engine: Any, name: str, check: str, prompts: Any, params: Any,
               hold: Callable[[], contextlib.AbstractContextManager[StepHold]]) -> Iterator[tuple[_Call, StepHold]]:
    with hold() as h:
        call = _Call(engine, prompts, params)
        try:
            if not h.wait_held():
                raise _fail(name, check, "the generate call never reached the hold", "call the hold after each decode step")
            yield call, h
        finally:
            h.release()
            engine.resume()
