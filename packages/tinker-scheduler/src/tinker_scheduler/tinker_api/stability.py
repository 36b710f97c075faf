"""Stability records for ``stable_reinforce``: what the sampler produced, looked up by ``sequence_id``.

A sampling client made with ``record_stability_info=True`` sends it on every ``asample``; the
gateway then records, for each returned sequence (``sequence_id`` ``<request_id>-<i>``, the ids the
``asample`` answer lists), the prompt, the sampled tokens and the sampler's own logprobs of them.
A ``forward_backward`` with ``loss_fn="stable_reinforce"`` must carry provenance on every datum
(``Datum.with_provenance``: runs tiling ``target_tokens``); :meth:`StabilityRecords.resolve`
checks each run against the record it names (same tokens) and trains the sampled positions
against the *recorded* sampler logprobs, not the ones the client sent. Positions a prompt run
covers were not sampled: they carry no loss (weight 0).

Records belong to the tenant that sampled them (another tenant's id is "not recorded"), live for
:data:`TTL_S` after sampling, and each training request that uses one restarts that time (as
Tinker documents); at most :data:`MAX_RECORDS` sequences and :data:`MAX_VALUES` stored values
(prompt tokens, sampled tokens and logprobs, 4 bytes each; the samples of one request share their
prompt) are kept, the least recently used dropped first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinker_scheduler.errors import StatusError

#: How long a recorded sequence can be trained on after its last use (one day, as in Tinker).
TTL_S = 24 * 3600.0
#: The most sequences one gateway keeps recorded.
MAX_RECORDS = 200_000
#: The most values (tokens and logprobs) the records hold together: 256 MiB of int32/float32.
MAX_VALUES = 64 * 1024 * 1024

#: Tags of a decoded provenance run (:func:`tinker_scheduler.tinker_api.protowire.read_forward_backward`).
PROMPT, SAMPLED = "prompt", "sampled"


@dataclass(frozen=True, eq=False)
class Recorded:
    """One sampled sequence as the sampler produced it (int32 tokens, float32 logprobs)."""

    prompt: np.ndarray
    tokens: np.ndarray
    logprobs: np.ndarray

    @property
    def size(self) -> int:
        """The values it holds (its prompt counted in full, though shared)."""
        return len(self.prompt) + len(self.tokens) + len(self.logprobs)


class StabilityRecords:
    """The recorded sequences of one gateway, per tenant."""

    def __init__(self, *, ttl_s: float = TTL_S, max_records: int = MAX_RECORDS, max_values: int = MAX_VALUES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.max_records, self.max_values, self.clock = ttl_s, max_records, max_values, clock
        self._records: OrderedDict[tuple[str, str], tuple[Recorded, float]] = OrderedDict()
        self._values = 0
        self._lock = threading.Lock()

    def record(self, tenant: str, request_id: str, prompt: Sequence[int], samples: Sequence[Mapping[str, Any]]) -> None:
        """Record the ``samples`` of one ``asample`` (``tokens``, ``logprobs`` each) under
        ``<request_id>-<i>``."""
        now = self.clock()
        shared = np.asarray(prompt, dtype=np.int32)
        with self._lock:
            for i, s in enumerate(samples):
                rec = Recorded(shared, np.asarray(s["tokens"], dtype=np.int32), np.asarray(s["logprobs"], dtype=np.float32))
                self._drop((tenant, f"{request_id}-{i}"))
                self._records[(tenant, f"{request_id}-{i}")] = (rec, now)
                self._values += rec.size
            while self._records and (len(self._records) > self.max_records or self._values > self.max_values):
                self._drop(next(iter(self._records)))

    def _drop(self, key: tuple[str, str]) -> None:
        entry = self._records.pop(key, None)
        if entry is not None:
            self._values -= entry[0].size

    def get(self, tenant: str, sequence_id: str, where: str) -> Recorded:
        """The tenant's record ``sequence_id`` (its time restarted); INVALID_ARGUMENT naming
        ``where`` when there is none or it expired."""
        now = self.clock()
        with self._lock:
            entry = self._records.get((tenant, sequence_id))
            if entry is None or now - entry[1] > self.ttl_s:
                self._drop((tenant, sequence_id))
                raise StatusError("INVALID_ARGUMENT", f"{where}: sequence {sequence_id!r} is not recorded (or expired); "
                                                      "sample it with record_stability_info=True in this session and "
                                                      "train on it within a day")
            self._records[(tenant, sequence_id)] = (entry[0], now)
            self._records.move_to_end((tenant, sequence_id))
            return entry[0]

    def resolve(self, tenant: str, i: int, datum: dict[str, list[float]], spans: Sequence[Mapping[str, Any]]) -> None:
        """Datum ``i`` (the fields of :func:`tinker_algos.tinker_ops.datum_batch`) trained against
        the recorded sampler logprobs its provenance ``spans`` name, in place."""
        where = f"data[{i}].loss_fn_input_spans"
        targets = [int(t) for t in datum["target_tokens"]]
        T = len(targets)
        if not spans:
            raise StatusError("INVALID_ARGUMENT", f"{where}: stable_reinforce needs provenance on every datum; sample "
                                                  "with record_stability_info=True and attach Datum.with_provenance(...)")
        if sum(int(s["length"]) for s in spans) != T:
            raise StatusError("INVALID_ARGUMENT", f"{where}: the runs cover {sum(int(s['length']) for s in spans)} "
                                                  f"positions but target_tokens has {T}; they must tile it exactly")
        weights = np.asarray(datum.get("loss_weights") or [1.0] * T, dtype=np.float64).reshape(-1)
        sampler = np.asarray(datum.get("sampling_logprobs") or [0.0] * T, dtype=np.float64).reshape(-1)
        if len(weights) != T or len(sampler) != T:
            raise StatusError("INVALID_ARGUMENT", f"data[{i}]: weights and logprobs need one entry per target token ({T})")
        pos = 0
        for j, span in enumerate(spans):
            n, off = int(span["length"]), int(span["offset"])
            rec = self.get(tenant, str(span["sequence_id"]), f"{where}[{j}]")
            source = rec.tokens if span["kind"] == SAMPLED else rec.prompt
            if off + n > len(source) or source[off:off + n].tolist() != targets[pos:pos + n]:
                what = "sampled tokens" if span["kind"] == SAMPLED else "prompt"
                raise StatusError("INVALID_ARGUMENT", f"{where}[{j}]: target_tokens[{pos}:{pos + n}] are not "
                                                      f"{what}[{off}:{off + n}] of sequence {span['sequence_id']!r}")
            if span["kind"] == SAMPLED:
                sampler[pos:pos + n] = rec.logprobs[off:off + n]
            else:
                weights[pos:pos + n] = 0.0  # not sampled: no sampler logprob to train against
            pos += n
        datum["loss_weights"], datum["sampling_logprobs"] = weights.tolist(), sampler.tolist()
