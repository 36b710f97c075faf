"""The learner's weights handed to a job's rollout engine, in the engine's four phases.

An engine that shares the learner's model (``shares_policy``: the ``hf`` engine of the job's
process) only records the version. Any other engine (the ``vllm`` one) samples from its own copy, so before a step samples,
:func:`sync_engine` writes the policy's LoRA adapter of that version as a peft directory under
``<run_dir>/engine-adapters/v-<version>/``, hashes it (:func:`tinker_core.engines.tree_sha256`,
the manifest hash) and scores the probe batch with the learner
(:func:`~tinker_algos.distributed.rollout_worker.probe_logprobs`, the distributed sync check's
probe); then ``pause("wait")``, ``start_weight_update``, ``update_weights`` (a versioned adapter
with the hash and the probe), ``finish_weight_update`` -- where the engine checks what it holds
against both -- and ``resume``. The newest two adapter directories are kept.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from tinker_algos.distributed.rollout_worker import probe_logprobs
from tinker_algos.distributed.rollouts import probe_tokens
from tinker_core.engines import EngineError, WeightUpdate, tree_sha256

KEEP = 2


def version_probe(tokenizer: Any, version: int) -> np.ndarray:
    """The probe batch of a sync: the distributed check's two fixed rows and one row of its own
    version (the probe text rotated by ``2 + version`` tokens, cycling), which no cache of the
    engine's server can have seen at an earlier version -- so a stale prefix cache shows as old
    rows that disagree while the new one agrees."""
    fixed = probe_tokens(tokenizer)
    ids = fixed[0].tolist()
    shift = 2 + version % max(len(ids) - 2, 1)
    return np.concatenate([fixed, np.asarray([ids[shift:] + ids[:shift]], dtype=fixed.dtype)])


def sync_engine(engine: Any, policy: Any, adapter: str | None, version: int, run_dir: str | Path) -> None:
    """Make ``engine`` sample with the learner's weights of ``version`` (see the module docstring)."""
    if getattr(engine, "shares_policy", False):
        if engine.health().weight_version is None or engine.health().weight_version < version:
            engine.start_weight_update(version)
            engine.update_weights(WeightUpdate(version))  # the model is shared: nothing moves
            engine.finish_weight_update(version)
        return
    if engine.health().weight_version == version:
        return
    if adapter is None:
        raise EngineError(
            f"rollout.engine {engine.name!r} loads the policy as versioned LoRA adapters: give the job a lora section "
            "(full fine-tuning needs rollout.engine: hf)"
        )
    from tinker_algos.training.checkpoint import save_adapter

    root = Path(run_dir) / "engine-adapters"
    target = root / f"v-{version:08d}"
    if target.exists():
        shutil.rmtree(target)
    root.mkdir(parents=True, exist_ok=True)
    save_adapter(policy, adapter, target)
    tokens = version_probe(policy.tokenizer, version)
    probe = probe_logprobs(policy, adapter, tokens)
    update = WeightUpdate(
        version, "adapter", sha256=tree_sha256(target), path=str(target.resolve()),
        probe_tokens=tuple(tuple(int(t) for t in row) for row in tokens),
        probe_logprobs=tuple(tuple(float(x) for x in row) for row in probe),
    )
    if engine.health().weight_version is None:
        engine.init_weight_transfer()
    engine.pause("wait")
    try:
        engine.start_weight_update(version)
        engine.update_weights(update)
        engine.finish_weight_update(version)
    except BaseException:
        with contextlib.suppress(Exception):  # the update's error is the one to report
            engine.resume()
        raise
    engine.resume()
    for old in sorted(p for p in root.iterdir() if p.name.startswith("v-"))[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
