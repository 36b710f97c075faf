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

from tinker_algos import moved_modules
from tinker_algos.model.openmp import choose_wait_policy
from tinker_core.lazy import lazy_package

# before anything loads torch: OpenMP threads wait passively on a busy machine (tinker_algos.model.openmp)
choose_wait_policy()
# the module paths from before the rooms keep working for one release (tinker_algos.moved_modules)
moved_modules.install()

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - the public names, listed once (lazy_package reads them too)
    from tinker_algos.model.device import DeviceSpec as DeviceSpec
    from tinker_algos.model.device import resolve_device as resolve_device
    from tinker_algos.model.device import seed_everything as seed_everything
    from tinker_algos.model.models import TINY as TINY
    from tinker_algos.model.models import LoraSpec as LoraSpec
    from tinker_algos.model.models import ModelLoadError as ModelLoadError
    from tinker_algos.model.models import PolicyModel as PolicyModel
    from tinker_algos.model.models import build_tiny_model as build_tiny_model
    from tinker_algos.model.models import load_model as load_model
    from tinker_algos.model.models import resolve_model as resolve_model
    from tinker_algos.model.models import sequence_logprobs as sequence_logprobs
    from tinker_algos.model.prompts import encode_prompt as encode_prompt
    from tinker_algos.model.prompts import render_prompt as render_prompt
    from tinker_algos.model.tokenizer import build_char_tokenizer as build_char_tokenizer
    from tinker_algos.model.tokenizer import load_tokenizer as load_tokenizer
    from tinker_algos.records.health import logprob_agreement as logprob_agreement
    from tinker_algos.run.forking import fork as fork
    from tinker_algos.run.job import TrainResult as TrainResult
    from tinker_algos.run.job import train as train
    from tinker_algos.sampling.sampler import SampledSequence as SampledSequence
    from tinker_algos.sampling.sampler import Sampler as Sampler
    from tinker_algos.sampling.sampler import SamplingParams as SamplingParams
    from tinker_algos.sampling.sampler import sample as sample
    from tinker_algos.sampling.sampler import sequences_to_batch as sequences_to_batch
    from tinker_algos.training.checkpoint import CheckpointError as CheckpointError
    from tinker_algos.training.checkpoint import load_state as load_state
    from tinker_algos.training.checkpoint import read_manifest as read_manifest
    from tinker_algos.training.checkpoint import save_state as save_state
    from tinker_algos.training.gradient_pass import aggregate as aggregate
    from tinker_algos.training.trainer import Trainer as Trainer
    from tinker_algos.training.trainer import TrainerConfig as TrainerConfig
    from tinker_algos.training.trainer import aggregation_modes as aggregation_modes
    from tinker_algos.training.trainer import lr_multiplier as lr_multiplier
    from tinker_algos.training.trainer import restore_trainer as restore_trainer

__getattr__, __dir__, __all__ = lazy_package(__name__, "__version__")
