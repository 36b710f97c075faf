"""Seed derivation: one stable seed from any parts (a job seed, a step, a role, an index...).

Stable across processes, machines and Python versions (it never uses ``hash``), so a run that
derives the seed of "step 7, group 3" gets the same number after a restart or on another worker.
"""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object, bits: int = 31) -> int:
    """A ``bits``-bit non-negative seed from ``parts`` (their ``repr``, hashed with SHA-256).

    31 bits (the default) fits every RNG's seed argument (numpy, torch, ``random``); pass
    ``bits=63`` for a wider one. The same parts always give the same seed.
    """
    if not 1 <= bits <= 64:
        raise ValueError(f"bits must be between 1 and 64, got {bits}")
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << bits) - 1)
