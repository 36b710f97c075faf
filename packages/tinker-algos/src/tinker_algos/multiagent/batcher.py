"""Batches the learners' sample requests of concurrent episodes into deterministic rounds.

A learner's request waits until every unfinished episode has either asked for a sample or
ended; then the requests are sampled together, one batch per adapter (a *round*). Round ``r``
thus holds the ``r``-th policy turn of each episode still running, whatever the threads'
timing, and round ``r`` of adapter ``a`` is sampled with the seed
``derive_seed(params.seed, r, a)``: the same seeds give the same samples.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tinker_algos.model.models import PolicyModel
from tinker_algos.sampling.engine import HFEngine
from tinker_algos.sampling.sampler import SampledSequence, SamplingParams
from tinker_core.seeding import derive_seed

if TYPE_CHECKING:
    from tinker_core.engines import RolloutEngine

__all__ = ["Batcher"]


@dataclass
class _Request:
    order: tuple[int, int]  # (episode index, role index): the row order within a round
    adapter: str | None
    context: list[int]
    future: asyncio.Future[SampledSequence]


class Batcher:
    """Collects the learners' requests; samples a round once every live episode is waiting.

    The sampling itself runs on ``executor`` (one worker thread), off the event loop. A sampler
    failure is a bug, not a game event: it fails every request of the round and is kept in
    ``failure`` for the rollout to raise.
    """

    def __init__(
        self, policy: PolicyModel, params: SamplingParams, live: int, executor: cf.ThreadPoolExecutor,
        engine: RolloutEngine | None = None,
    ) -> None:
        self.policy = policy
        self.engine: Any = engine or HFEngine(policy)  # the job's rollout.engine (tinker_core.engines)
        self.params = params
        self.live = live
        self.executor = executor
        self.pending: list[_Request] = []
        self.flushing = False
        self.rounds = 0
        self.failure: BaseException | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def request(self, order: tuple[int, int], adapter: str | None, context: list[int]) -> SampledSequence:
        """The sample for ``context`` (with ``adapter``), once its round is sampled."""
        future: asyncio.Future[SampledSequence] = asyncio.get_running_loop().create_future()
        self.pending.append(_Request(order, adapter, context, future))
        self._maybe_flush()
        return await future

    def episode_done(self) -> None:
        """An episode ended: the rounds no longer wait for it."""
        self.live -= 1
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        self.pending = [r for r in self.pending if not r.future.done()]
        if self.flushing or not self.pending or len(self.pending) < self.live:
            return
        batch = sorted(self.pending, key=lambda r: r.order)
        self.pending = []
        self.flushing = True
        task = asyncio.ensure_future(self._flush(batch, self.rounds))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _sample_round(self, batch: list[_Request], round_index: int) -> list[SampledSequence]:
        adapters = sorted({r.adapter for r in batch}, key=lambda a: (a is not None, a or ""))
        out: dict[tuple[int, int], SampledSequence] = {}
        for adapter in adapters:
            rows = [r for r in batch if r.adapter == adapter]
            seed = None if self.params.seed is None else derive_seed(self.params.seed, round_index, adapter)
            params = replace(self.params, seed=seed, n=1)
            samples = self.engine.generate([r.context for r in rows], params, adapter=adapter)
            for r, outs in zip(rows, samples, strict=True):
                out[r.order] = outs[0]
        return [out[r.order] for r in batch]

    async def _flush(self, batch: list[_Request], round_index: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            seqs = await loop.run_in_executor(self.executor, self._sample_round, batch, round_index)
        except BaseException as e:  # a sampler failure is a bug: fail every request and the rollout
            self.failure = self.failure or e
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(e)
        else:
            for r, s in zip(batch, seqs, strict=True):
                if not r.future.done():
                    r.future.set_result(s)
        finally:
            self.rounds += 1
            self.flushing = False
            self._maybe_flush()
