"""The rollout-engine contract: what samples a job's episodes, in plain types (no torch).

A rollout engine turns token prompts into sampled tokens with their logprobs; it is told of new
weights in the four phases of vLLM's weight transfer, can be paused and resumed, and reports its
health. The built-in ``hf`` engine (tinker-algos, :mod:`tinker_algos.sampling.engine`) is the
in-process sampler; the ``vllm`` engine (the tinker-engine-vllm package) drives a vLLM server
over HTTP. Engines are registered through
:func:`tinker_core.hookspecs.opentinker_register_rollout_engines` and chosen by the job's
``rollout.engine``; :func:`tinker_core.testing.check_rollout_engine` is their conformance kit.

The life of an engine, as a job drives it::

    engine = factory(EngineContext(...))          # registered under rollout.engine
    engine.init_weight_transfer()                 # once, before the first update
    engine.generate(prompts, params)              # [prompt][sample] -> Generation
    engine.pause("wait")                          # before an update that must not race sampling
    engine.start_weight_update(v)                 # the four phases of one update ...
    engine.update_weights(WeightUpdate(v, ...))   # ... full weights or a versioned adapter
    engine.finish_weight_update(v)                # now health().weight_version == v
    engine.resume()
    engine.close()

Pause modes (vLLM's ``POST /pause?mode=``): ``abort`` ends the generate calls in flight at once,
their rows with stop reason ``abort`` (the tokens sampled so far are kept); ``wait`` lets them
finish; ``keep`` holds them where they are until :meth:`RolloutEngine.resume`, which continues
them. In every mode, ``pause`` returns once nothing is sampling, and a generate call made while
paused waits for ``resume``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from tinker_core.errors import OpenTinkerError

__all__ = [
    "PAUSE_MODES",
    "STOP_REASONS",
    "EngineContext",
    "EngineError",
    "EngineHealth",
    "EngineUnavailableError",
    "Generation",
    "GenerationLike",
    "GenerationParams",
    "PauseMode",
    "RolloutEngine",
    "SamplingParamsLike",
    "WeightSyncError",
    "WeightUpdate",
    "adapter_name",
    "check_pause_mode",
    "probe_gap",
    "tree_sha256",
    "verify_sync",
]

PauseMode = Literal["abort", "wait", "keep"]
PAUSE_MODES: tuple[str, ...] = ("abort", "wait", "keep")
STOP_REASONS: tuple[str, ...] = ("eos", "stop_id", "stop_string", "length", "abort")
"""Why a generation stopped: an end-of-turn token (``eos``), one of ``stop_token_ids``
(``stop_id``), a stop string (``stop_string``), ``max_new_tokens`` (``length``), or a pause in
mode ``abort`` (``abort``)."""


class EngineError(OpenTinkerError, RuntimeError):
    """A rollout engine refused a call or broke its contract (the message says which and why)."""


class EngineUnavailableError(EngineError):
    """The engine cannot serve (its server is unreachable, a package is missing); the message is
    one line naming what to start or install."""


class SamplingParamsLike(Protocol):
    """How to sample: the fields of :class:`GenerationParams` (tinker-algos'
    ``SamplingParams`` has them too)."""

    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    n: int
    stop: Sequence[str]
    stop_token_ids: Sequence[int]
    stop_at_eos: bool
    eos_token_ids: Sequence[int]
    seed: int | None


@dataclass
class GenerationParams:
    """How to sample, in plain types. ``top_k=0`` and ``top_p=1.0`` switch those filters off;
    ``temperature=0`` is greedy; ``seed`` makes the samples reproducible where the engine can."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    stop: Sequence[str] = ()
    stop_token_ids: Sequence[int] = ()
    stop_at_eos: bool = True
    eos_token_ids: Sequence[int] = ()
    seed: int | None = None


class GenerationLike(Protocol):
    """What a generation offers (tinker-algos' ``SampledSequence`` and :class:`Generation` do)."""

    @property
    def prompt_tokens(self) -> list[int]: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def logprobs(self) -> list[float]: ...
    @property
    def raw_logprobs(self) -> list[float]: ...
    @property
    def stop_reason(self) -> str: ...
    @property
    def text(self) -> str: ...


@dataclass
class Generation:
    """One sample: the prompt's ids, the sampled ids, per sampled token the logprob under the
    distribution sampled from (``logprobs``: temperature, top-k, top-p applied) and the policy's
    own (``raw_logprobs``: temperature 1, unfiltered), why it stopped (:data:`STOP_REASONS`), its
    text and the weight version it was sampled with (None when the engine does not know)."""

    prompt_tokens: list[int]
    tokens: list[int]
    logprobs: list[float]
    raw_logprobs: list[float]
    stop_reason: str
    text: str = ""
    prompt_index: int = 0
    sample_index: int = 0
    weight_version: int | None = None
    #: the policy's entropy (nats) at each sampled position where the engine computes it; else empty
    entropies: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class WeightUpdate:
    """One update's weights, as :meth:`RolloutEngine.update_weights` receives them.

    ``kind`` is ``full`` (every weight) or ``adapter`` (a LoRA adapter, named ``adapter`` on the
    engine once loaded; the vllm engine names it ``<job>-v<version>``). ``sha256`` is the
    manifest hash the learner published for these weights, ``path`` a directory holding them (a
    PEFT adapter or a weight record) when they travel through a file system, ``payload`` an
    in-process object the engine knows how to apply (tinker-algos' ``WeightRecord``; None when
    the engine shares the learner's model). ``probe_logprobs`` are the learner's logprobs of
    ``probe_tokens`` (rows of token ids) under these weights: an engine that can score prompts
    checks its own against them after the update.
    """

    version: int
    kind: Literal["full", "adapter"] = "full"
    sha256: str | None = None
    path: str | None = None
    payload: Any = None
    probe_tokens: tuple[tuple[int, ...], ...] = ()
    probe_logprobs: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class EngineHealth:
    """What an engine reports: whether it can serve (``ok``, else ``detail`` says why), the
    weight version it samples with (None before the first update), the adapters it holds, whether
    it is paused (the mode, or None) and how many generate calls are in flight."""

    ok: bool
    weight_version: int | None = None
    adapters: tuple[str, ...] = ()
    paused: str | None = None
    in_flight: int = 0
    detail: str = ""


@dataclass
class EngineContext:
    """What an engine factory gets: the job (its ``rollout`` section holds ``engine`` and
    ``engine_options``), the in-process policy and its adapter when the job has them (an
    in-process engine samples with them; a remote engine ignores them), and where the job keeps
    its files (a remote engine writes the adapters it loads there)."""

    job: Any
    policy: Any = None
    adapter: str | None = None
    run_dir: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class RolloutEngine(Protocol):
    """A rollout engine (see the module docstring). An engine that samples with the job's own
    in-process model object may set ``shares_policy = True``: the job then sends its updates
    without weights (``WeightUpdate(version)``); any other engine gets a versioned adapter
    directory with its manifest hash and the learner's probe logprobs."""

    name: str

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParamsLike, *, adapter: str | None = None
    ) -> list[list[GenerationLike]]:
        """Sample ``params.n`` continuations of each token prompt; ``[prompt][sample]``.
        ``adapter`` names the in-process adapter to sample with (None: the engine's current
        weights)."""
        ...

    def init_weight_transfer(self) -> None:
        """Prepare to receive weights (once, before the first update)."""
        ...

    def start_weight_update(self, version: int) -> None:
        """Begin the update to ``version`` (greater than the version held)."""
        ...

    def update_weights(self, update: WeightUpdate) -> None:
        """Receive the weights of the update begun (full weights or a versioned adapter)."""
        ...

    def finish_weight_update(self, version: int) -> None:
        """Make ``version`` the weights sampled with, and check they arrived."""
        ...

    def pause(self, mode: PauseMode = "wait") -> None:
        """Stop sampling (see the module docstring for the modes)."""
        ...

    def resume(self) -> None:
        """Sample again; calls held by ``keep`` continue."""
        ...

    def health(self) -> EngineHealth:
        """Whether it can serve, its weight version and adapters."""
        ...

    def close(self) -> None:
        """Release what it holds (threads, connections, a server it started)."""
        ...


def check_pause_mode(mode: object) -> PauseMode:
    """``mode`` as a :data:`PauseMode`, or an :class:`EngineError` naming the modes."""
    if mode not in PAUSE_MODES:
        raise EngineError(f"pause mode {mode!r} is not one of {', '.join(PAUSE_MODES)}")
    return mode  # type: ignore[return-value]


def adapter_name(job: str, version: int) -> str:
    """The versioned name of a job's adapter on an engine: ``<job>-v<version>``."""
    return f"{job}-v{version}"


class WeightSyncError(EngineError):
    """Weights an engine holds are not the ones it was sent (a record that does not match its
    manifest, a digest or probe logprobs that differ from the learner's)."""


def verify_sync(
    who: str, version: int, *, digest: str | None, sha256: str | None,
    probe: Any = None, learner_probe: Any = None, tolerance: float = 0.0,
) -> float | None:
    """The check after a weight sync: ``who`` (``"rollout worker w1"``) says it holds ``version``;
    the hash of what it holds (``digest``) must be the manifest's ``sha256`` and its logprobs of
    the probe batch (``probe``, an array-like) within ``tolerance`` nats per token (mean absolute
    difference) of the learner's (``learner_probe``). A ``None`` on either side skips that half.
    Returns the probe gap (None when not compared); raises :class:`WeightSyncError` naming who,
    the version and what differed."""
    import numpy as np

    if digest is not None and sha256 is not None and digest != sha256:
        raise WeightSyncError(
            f"{who} reports weights v{version}, but its parameters hash to "
            f"{digest[:12]}, not the record's {sha256[:12]}: the update did not reach its model"
        )
    if probe is None or learner_probe is None:
        return None
    gap = probe_gap(probe, learner_probe)
    if gap > tolerance:
        raise WeightSyncError(
            f"{who} with weights v{version}: its probe logprobs differ from the "
            f"learner's by {gap:.3g} nats per token (execution.sync_tolerance {tolerance:g})"
        )
    return float(np.float64(gap))


def probe_gap(a: Any, b: Any) -> float:
    """Mean absolute difference of two probe logprob arrays (nats per token); ``inf`` when their
    shapes differ."""
    import numpy as np

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        return float("inf")
    return float(np.abs(x - y).mean()) if x.size else 0.0


def tree_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a directory's files (each file's relative path and bytes, in path order): the
    manifest hash of an adapter written for an engine to load, computed the same way by the
    learner that writes it and by the engine that checks what it pointed the server at."""
    import hashlib
    from pathlib import Path

    root = Path(path)
    if not root.is_dir():
        raise EngineError(f"{root} is not a directory of weights")
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = f.relative_to(root).as_posix().encode()
        h.update(len(rel).to_bytes(8, "little") + rel)
        data = f.read_bytes()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()
