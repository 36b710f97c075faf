"""The ``hf`` rollout engine: the in-process sampler behind :class:`tinker_core.engines.RolloutEngine`.

:class:`HFEngine` wraps :func:`tinker_algos.sampling.sampler.sample` (same calls, same samples
bit for bit for the same seed) and adds what the engine contract asks for:

* **weights** -- in the job's process the engine shares the learner's model, so an update has
  nothing to move: the four phases only record the version (``update.payload`` is None). A
  rollout worker's engine holds a replica and is built with ``apply``: its updates carry a
  :class:`~tinker_algos.distributed.weights.WeightRecord`, which ``apply`` checks against its
  manifest and copies into the replica's trainable weights
  (:func:`tinker_algos.distributed.rollout_worker.apply_record`).
* **pause** -- a gate the decode loop passes after every step (the sampler's ``on_step``):
  ``abort`` ends the calls in flight there, their running rows with stop reason ``abort``;
  ``wait`` lets them run to the end; ``keep`` parks them at the gate until :meth:`HFEngine.resume`
  (they continue exactly where they stopped: same tokens as unpaused). A call made while paused
  waits for ``resume``. Calls run one at a time (they share one model).
* **hints** -- ``turn_cache``, ``cache_keys`` and ``store_cache`` of :func:`sample` (the KV reuse
  of multi-turn rollouts) pass through; other engines ignore them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from tinker_algos.model.models import PolicyModel
from tinker_algos.sampling.sampler import SampledSequence, SamplingParams, sample
from tinker_core.engines import (
    EngineContext,
    EngineError,
    EngineHealth,
    PauseMode,
    SamplingParamsLike,
    WeightUpdate,
    check_pause_mode,
)

__all__ = ["HFEngine", "hf_engine"]

_HINTS = ("turn_cache", "cache_keys", "store_cache")


class HFEngine:
    """The in-process sampler as a rollout engine (see the module docstring). ``adapter`` is the
    adapter sampled with when a call names none (None: the base model)."""

    name = "hf"

    def __init__(self, policy: PolicyModel, *, adapter: str | None = None, apply: Callable[..., None] | None = None) -> None:
        self.policy = policy
        self.adapter = adapter
        self.apply = apply  # apply(policy, adapter, payload): how an update's payload reaches the model
        self.shares_policy = apply is None  # samples with the learner's own model: updates carry nothing
        self.version: int | None = None
        self._updating: int | None = None
        self._cond = threading.Condition()
        self._run = threading.Lock()  # one decode at a time: the calls share one model
        self._paused: str | None = None
        self._in_flight = 0
        self._held = 0
        self.step_hook: Any = None  # called at the gate before each check (tinker_core.testing.StepHold)

    # ---- generation -----------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParamsLike, *, adapter: str | None = None, **hints: Any
    ) -> list[list[SampledSequence]]:
        """:func:`sample` of the token ``prompts`` (``[prompt][sample]``), through the pause gate."""
        kwargs = {k: v for k, v in hints.items() if k in _HINTS}
        if not isinstance(params, SamplingParams):
            # the fields the plain params have (tinker_core.engines.GenerationParams); the rest keep their defaults
            params = SamplingParams(**{f: getattr(params, f) for f in SamplingParams.__dataclass_fields__ if hasattr(params, f)})
        self._enter()
        try:
            return sample(
                self.policy, [list(p) for p in prompts], params, adapter=adapter if adapter is not None else self.adapter,
                on_step=self._gate, **kwargs,
            )
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()
            self._run.release()

    def _enter(self) -> None:
        """Wait while paused, then take the model (in flight until the call returns)."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._paused is None)
            self._run.acquire()
            with self._cond:
                if self._paused is None:
                    self._in_flight += 1
                    return
            self._run.release()  # paused while waiting for the model: wait for resume again

    def _gate(self) -> bool:
        """The decode loop's per-step check: True ends the call (``abort``); ``keep`` parks here."""
        if self.step_hook is not None:
            self.step_hook()
        if self._paused is None:
            return False
        with self._cond:
            if self._paused == "keep":
                self._held += 1
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._paused != "keep")
                self._held -= 1
            return self._paused == "abort"

    # ---- pause ------------------------------------------------------------------------------
    def pause(self, mode: PauseMode = "wait") -> None:
        """Stop sampling; returns once no call is decoding (``keep``: every one is parked)."""
        mode = check_pause_mode(mode)
        with self._cond:
            self._paused = mode
            self._cond.notify_all()
            if mode == "keep":
                self._cond.wait_for(lambda: self._held == self._in_flight)
            else:
                self._cond.wait_for(lambda: self._in_flight == 0)

    def resume(self) -> None:
        with self._cond:
            self._paused = None
            self._cond.notify_all()

    # ---- weights ----------------------------------------------------------------------------
    def init_weight_transfer(self) -> None:
        """Nothing to set up: weights arrive in-process."""

    def start_weight_update(self, version: int) -> None:
        with self._cond:
            if self._updating is not None:
                raise EngineError(f"hf engine: update to v{self._updating} is still open; finish it before starting v{version}")
            if self.version is not None and version <= self.version:
                raise EngineError(f"hf engine: an update to v{version} would not move forward from v{self.version}")
            self._updating = version

    def update_weights(self, update: WeightUpdate) -> None:
        """Apply ``update.payload`` to the model with ``apply``; None: the model is shared."""
        if update.version != self._updating:
            raise EngineError(f"hf engine: update_weights(v{update.version}) outside its update (open: v{self._updating})")
        if update.payload is None:
            return
        if self.apply is None:
            raise EngineError("hf engine: this engine shares the learner's model and takes no weights (build it with apply=...)")
        self.apply(self.policy, self.adapter, update.payload)

    def finish_weight_update(self, version: int) -> None:
        with self._cond:
            if version != self._updating:
                raise EngineError(f"hf engine: finish_weight_update(v{version}) but the open update is v{self._updating}")
            self.version, self._updating = version, None

    def follow(self, version: int) -> None:
        """The learner's own model (``shares_policy``) holds the weights of ``version`` now: record
        it, through the phases of an update that moves nothing (an older ``version`` is a no-op)."""
        if self.version is None or self.version < version:
            self.start_weight_update(version)
            self.update_weights(WeightUpdate(version))
            self.finish_weight_update(version)

    def forget_version(self) -> None:
        """Hold no known version (the next update may carry any version): a replica reloading."""
        with self._cond:
            self.version = self._updating = None

    # ---- state ------------------------------------------------------------------------------
    def health(self) -> EngineHealth:
        with self._cond:
            return EngineHealth(
                ok=True, weight_version=self.version, adapters=tuple(self.policy.adapter_names),
                paused=self._paused, in_flight=self._in_flight, detail="in-process sampler",
            )

    def close(self) -> None:
        self.resume()  # nothing held: let any parked call finish


def hf_engine(context: EngineContext) -> HFEngine:
    """The factory registered as ``hf``: the job's in-process policy and adapter."""
    if context.policy is None:
        raise EngineError("the hf engine samples in the job's process and needs its policy; none was given")
    return HFEngine(context.policy, adapter=context.adapter)


def open_stage_engine(job: Any, stage: Any, policy: PolicyModel, adapter: str | None, run_dir: Any) -> Any:
    """The rollout engine of a stage that samples (``rollout.engine``), built and asked for its
    health before the stage's first step; None for a stage without an env (nothing to sample).

    An engine that cannot serve fails here with one line (:class:`EngineUnavailableError`). An
    engine other than ``hf`` samples in a single-agent, in-process stage only (the hf engine
    samples multi-agent rounds, a sample-ahead copy and the rollout workers).
    """
    from tinker_core.engines import EngineUnavailableError
    from tinker_core.registry import get_rollout_engine

    r = stage.rollout
    if stage.env is None:
        return None
    if r.engine != "hf":
        where = f"rollout.engine {r.engine!r}"
        if r.max_staleness > 0 or job.execution.distributed:
            raise EngineError(
                f"{where} samples in the job's process with the newest weights: set rollout.max_staleness: 0 and "
                "execution.rollout_workers: 0, learners: 1 (or use rollout.engine: hf)"
            )
        multi_agent = getattr(stage.algorithm.params, "multi_agent", None)
        if multi_agent is not None:
            raise EngineError(f"{where}: multi-agent stages sample with the hf engine only; use rollout.engine: hf")
    factory = get_rollout_engine(r.engine).obj
    context = EngineContext(job=job, policy=policy, adapter=adapter, run_dir=str(run_dir), options=dict(r.engine_options))
    engine = factory(context)
    health = engine.health()
    if not health.ok:
        engine.close()
        raise EngineUnavailableError(f"rollout.engine {r.engine!r}: {health.detail}")
    return engine
