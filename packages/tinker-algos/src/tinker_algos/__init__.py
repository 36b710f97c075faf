"""tinker-algos: OpenTinker's training engine on torch, transformers and peft.

Importing this package is cheap (no torch): names load from their submodules on first use.

* models: :class:`PolicyModel`, :class:`LoraSpec`, :func:`resolve_model`, :func:`build_tiny_model`
* tokenizers: :func:`load_tokenizer`, :func:`build_char_tokenizer`, :func:`render_prompt`,
  :func:`encode_prompt`
* sampling: :func:`sample`, :class:`SamplingParams`, :class:`SampledSequence`,
  :func:`sequences_to_batch`, :func:`logprob_agreement`
* training: :class:`Trainer`, :class:`TrainerConfig`, :func:`lr_multiplier`
* checkpoints: :func:`save_state`, :func:`load_state`, :func:`restore_trainer`,
  :func:`read_manifest`
* devices: :func:`resolve_device`, :class:`DeviceSpec`, :func:`seed_everything`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # device
    "DeviceSpec": "tinker_algos.device",
    "resolve_device": "tinker_algos.device",
    "seed_everything": "tinker_algos.device",
    # models
    "TINY": "tinker_algos.models",
    "LoraSpec": "tinker_algos.models",
    "ModelLoadError": "tinker_algos.models",
    "PolicyModel": "tinker_algos.models",
    "build_tiny_model": "tinker_algos.models",
    "load_model": "tinker_algos.models",
    "resolve_model": "tinker_algos.models",
    "sequence_logprobs": "tinker_algos.models",
    # tokenizer
    "build_char_tokenizer": "tinker_algos.tokenizer",
    "encode_prompt": "tinker_algos.tokenizer",
    "load_tokenizer": "tinker_algos.tokenizer",
    "render_prompt": "tinker_algos.tokenizer",
    # sampler
    "SampledSequence": "tinker_algos.sampler",
    "Sampler": "tinker_algos.sampler",
    "SamplingParams": "tinker_algos.sampler",
    "logprob_agreement": "tinker_algos.sampler",
    "sample": "tinker_algos.sampler",
    "sequences_to_batch": "tinker_algos.sampler",
    # trainer
    "Trainer": "tinker_algos.trainer",
    "TrainerConfig": "tinker_algos.trainer",
    "aggregation_modes": "tinker_algos.trainer",
    "lr_multiplier": "tinker_algos.trainer",
    "restore_trainer": "tinker_algos.trainer",
    # checkpoint
    "CheckpointError": "tinker_algos.checkpoint",
    "load_state": "tinker_algos.checkpoint",
    "read_manifest": "tinker_algos.checkpoint",
    "save_state": "tinker_algos.checkpoint",
    # training entry point
    "train": "tinker_algos.run",
    "TrainResult": "tinker_algos.run",
    # loss aggregation
    "aggregate": "tinker_algos.aggregation",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover
    from tinker_algos.aggregation import aggregate as aggregate
    from tinker_algos.checkpoint import (
        CheckpointError as CheckpointError,
    )
    from tinker_algos.checkpoint import (
        load_state as load_state,
    )
    from tinker_algos.checkpoint import (
        read_manifest as read_manifest,
    )
    from tinker_algos.checkpoint import (
        save_state as save_state,
    )
    from tinker_algos.device import DeviceSpec as DeviceSpec
    from tinker_algos.device import resolve_device as resolve_device
    from tinker_algos.device import seed_everything as seed_everything
    from tinker_algos.models import (
        TINY as TINY,
    )
    from tinker_algos.models import (
        LoraSpec as LoraSpec,
    )
    from tinker_algos.models import (
        ModelLoadError as ModelLoadError,
    )
    from tinker_algos.models import (
        PolicyModel as PolicyModel,
    )
    from tinker_algos.models import (
        build_tiny_model as build_tiny_model,
    )
    from tinker_algos.models import (
        load_model as load_model,
    )
    from tinker_algos.models import (
        resolve_model as resolve_model,
    )
    from tinker_algos.models import (
        sequence_logprobs as sequence_logprobs,
    )
    from tinker_algos.sampler import (
        SampledSequence as SampledSequence,
    )
    from tinker_algos.sampler import (
        Sampler as Sampler,
    )
    from tinker_algos.sampler import (
        SamplingParams as SamplingParams,
    )
    from tinker_algos.sampler import (
        logprob_agreement as logprob_agreement,
    )
    from tinker_algos.sampler import (
        sample as sample,
    )
    from tinker_algos.sampler import (
        sequences_to_batch as sequences_to_batch,
    )
    from tinker_algos.tokenizer import (
        build_char_tokenizer as build_char_tokenizer,
    )
    from tinker_algos.tokenizer import (
        encode_prompt as encode_prompt,
    )
    from tinker_algos.tokenizer import (
        load_tokenizer as load_tokenizer,
    )
    from tinker_algos.tokenizer import (
        render_prompt as render_prompt,
    )
    from tinker_algos.trainer import Trainer as Trainer
    from tinker_algos.trainer import TrainerConfig as TrainerConfig
    from tinker_algos.trainer import aggregation_modes as aggregation_modes
    from tinker_algos.trainer import lr_multiplier as lr_multiplier
    from tinker_algos.trainer import restore_trainer as restore_trainer
