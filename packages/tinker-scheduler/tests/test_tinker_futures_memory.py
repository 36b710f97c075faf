"""The gateway's futures hold finished answers in memory only up to a byte bound; the store keeps
them all, so a client polls an answer the memory forgot and still gets it (the 30-minute soak's
slow growth was every answer kept in memory)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tinker_scheduler.tinker_api.futures import Futures
from tinker_scheduler.tinker_api.records import Records


def test_finished_answers_are_held_up_to_the_byte_bound_and_read_back_from_the_store(tmp_path: Path) -> None:
    futures = Futures(Records(tmp_path / "records.db"), max_held_bytes=10_000)
    try:
        ids = [futures.submit("t1", "model-a", lambda i=i: {"i": i, "pad": "x" * 3000}) for i in range(10)]
        answers = [asyncio.run(futures.wait("t1", request_id, timeout=30)) for request_id in ids]
        assert all(a is not None and f'"i": {i}'.encode() in a.body for i, a in enumerate(answers))
        deadline = time.monotonic() + 10
        while futures.answers_held > 3 and time.monotonic() < deadline:
            time.sleep(0.01)  # the last done-callbacks
        assert futures.held_bytes <= 10_000 and 1 <= futures.answers_held <= 3  # about 3,000 bytes an answer
        for i, request_id in enumerate(ids):  # asked again: the forgotten ones come from the store
            answer = asyncio.run(futures.wait("t1", request_id, timeout=5))
            assert answer is not None and f'"i": {i}'.encode() in answer.body
    finally:
        futures.close()
        futures.records.close()
