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
* runs: :func:`train`, :func:`fork` (a new run from a checkpoint of another, with overrides)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_algos.openmp import choose_wait_policy
from tinker_core.lazy import lazy_package

# before anything loads torch: OpenMP threads wait passively on a busy machine (tinker_algos.openmp)
choose_wait_policy()

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - the public names, listed once (lazy_package reads them too)
    from tinker_algos.aggregation import aggregate as aggregate
    from tinker_algos.checkpoint import CheckpointError as CheckpointError
    from tinker_algos.checkpoint import load_state as load_state
    from tinker_algos.checkpoint import read_manifest as read_manifest
    from tinker_algos.checkpoint import save_state as save_state
    from tinker_algos.device import DeviceSpec as DeviceSpec
    from tinker_algos.device import resolve_device as resolve_device
    from tinker_algos.device import seed_everything as seed_everything
    from tinker_algos.forking import fork as fork
    from tinker_algos.models import TINY as TINY
    from tinker_algos.models import LoraSpec as LoraSpec
    from tinker_algos.models import ModelLoadError as ModelLoadError
    from tinker_algos.models import PolicyModel as PolicyModel
    from tinker_algos.models import build_tiny_model as build_tiny_model
    from tinker_algos.models import load_model as load_model
    from tinker_algos.models import resolve_model as resolve_model
    from tinker_algos.models import sequence_logprobs as sequence_logprobs
    from tinker_algos.run import TrainResult as TrainResult
    from tinker_algos.run import train as train
    from tinker_algos.sampler import SampledSequence as SampledSequence
    from tinker_algos.sampler import Sampler as Sampler
    from tinker_algos.sampler import SamplingParams as SamplingParams
    from tinker_algos.sampler import logprob_agreement as logprob_agreement
    from tinker_algos.sampler import sample as sample
    from tinker_algos.sampler import sequences_to_batch as sequences_to_batch
    from tinker_algos.tokenizer import build_char_tokenizer as build_char_tokenizer
    from tinker_algos.tokenizer import encode_prompt as encode_prompt
    from tinker_algos.tokenizer import load_tokenizer as load_tokenizer
    from tinker_algos.tokenizer import render_prompt as render_prompt
    from tinker_algos.trainer import Trainer as Trainer
    from tinker_algos.trainer import TrainerConfig as TrainerConfig
    from tinker_algos.trainer import aggregation_modes as aggregation_modes
    from tinker_algos.trainer import lr_multiplier as lr_multiplier
    from tinker_algos.trainer import restore_trainer as restore_trainer

__getattr__, __dir__, __all__ = lazy_package(__name__, "__version__")
