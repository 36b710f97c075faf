"""The C heap on the CPU: large tensors mapped from and returned to the system one by one.

torch's CPU allocator takes memory from the C library's ``malloc``. glibc serves a large block
(past its *mmap threshold*) with a fresh mapping and returns it on ``free``, but the threshold
moves: each freed mapping raises it to that block's size, up to 32 MiB on 64-bit systems, after
which blocks of a training pass's sizes (activations, logits chunks, the checkpointed layers'
recomputed tensors) come from the heap instead, and a heap whose freed holes do not fit the next
request grows. The process's resident memory then follows the heap's high-water mark, not what
the tensors hold: on SmolLM2-135M a checkpointed 8-row pass of 400 tokens peaked at 4.8 GiB
resident with the moving threshold and 1.9 GiB with a fixed one
(``docs/explanation/experiments/memory.md``). :func:`release_freed_memory` fixes the threshold
(``mallopt(M_MMAP_THRESHOLD, ...)``, which also stops it moving): every block past it is mapped
and returned on ``free``, at the cost of the page faults of mapping it again.

Process-wide and for the process's life; a no-op where the C library is not glibc (macOS, musl).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["MMAP_THRESHOLD_BYTES", "release_freed_memory"]

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (``<malloc.h>``)."""

MMAP_THRESHOLD_BYTES = 64 * 1024
"""Blocks from this size up are mapped and returned to the system on ``free`` (a few rows of a
hidden-state tensor; small Python objects stay on the heap)."""


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None


def release_freed_memory(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process; True when it took effect
    (False off glibc, or when ``mallopt`` refuses)."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, int(threshold)))
