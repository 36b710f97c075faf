"""A copy of a job's policy in another process: what rollout workers and learner actors hold.

:func:`load_job_policy` loads ``job.model`` as the job's own process does (device and precision,
threads, tokenizer, revision); :func:`add_job_adapter` gives it the job's LoRA adapter, created
with the same seed. The trainable weights are then overwritten by the learner's (a weight
record, :mod:`tinker_algos.distributed.weights`), so a replica holds exactly what the learner
holds, bit for bit.
"""

from __future__ import annotations

import torch

from tinker_algos.model.allocator import release_freed_memory
from tinker_algos.model.device import DeviceError, resolve_device
from tinker_algos.model.models import LoraSpec, PolicyModel
from tinker_core.config import JobConfig

ADAPTER = "policy"
"""The name of a single-policy job's LoRA adapter (the run's, see :mod:`tinker_algos.run.job`)."""


def load_job_policy(job: JobConfig, *, threads: int | None = None) -> PolicyModel:
    """``job.model`` loaded on its device in its precision; ``threads`` (default
    ``model.threads``) sets torch's intra-op threads of this process first, and
    ``model.release_memory`` its C heap's mmap threshold (:mod:`tinker_algos.model.allocator`)."""
    try:
        spec = resolve_device(job.model.device, job.model.precision)
    except DeviceError as e:
        raise e.in_config() from None
    threads = threads if threads is not None else job.model.threads
    if threads is not None:
        torch.set_num_threads(threads)
    if job.model.release_memory and spec.device.type == "cpu":
        release_freed_memory()
    return PolicyModel.load(job.model.name, spec=spec, tokenizer=job.model.tokenizer, revision=job.model.revision)


def job_lora(job: JobConfig) -> LoraSpec | None:
    """The job's LoRA settings (None: full fine-tuning)."""
    if job.lora is None:
        return None
    return LoraSpec(rank=job.lora.rank, alpha=job.lora.alpha, dropout=job.lora.dropout, target_modules=list(job.lora.target_modules))


def add_job_adapter(policy: PolicyModel, job: JobConfig) -> str | None:
    """Give ``policy`` the job's adapter (as the job's trainer creates it); its name, or None."""
    lora = job_lora(job)
    if lora is None:
        return None
    if ADAPTER not in policy.adapter_names:
        policy.add_adapter(ADAPTER, lora, seed=job.seed)
    return ADAPTER


def trainable(policy: PolicyModel, adapter: str | None) -> dict[str, torch.nn.Parameter]:
    """The weights a learner updates, by name: the adapter's, or every weight."""
    return dict(policy.trainable_parameters(adapter))
