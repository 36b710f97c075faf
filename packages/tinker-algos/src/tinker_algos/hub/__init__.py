"""Bring real pretrained models in: GGUF import and cached registry presets.

* :func:`import_gguf` turns a GGUF file into a Hugging Face directory (fp32 safetensors,
  tokenizer with its chat template, generation config stopping at the end-of-turn token);
  :func:`check_gguf` is its up-front check (one :class:`GGUFError` line per problem).
* :func:`fetch_preset` returns a registry preset's model directory (``smollm2-135m-instruct``),
  downloading and importing it into the cache once; :data:`PRESETS` lists them.
  :func:`tinker_algos.model.model_files.resolve_model` resolves preset names through it, so
  ``model.name: smollm2-135m-instruct`` works in a job config.
* :mod:`tinker_algos.hub.cache`: the cache directory, atomic directory writes, a file lock.

CLI: ``opentinker model import GGUF_FILE --output DIR`` and ``opentinker model fetch NAME``
(:mod:`tinker_algos.commands.cli_model`).
"""

from __future__ import annotations

from tinker_algos.hub.cache import ModelLoadError, atomic_dir, cache_root, file_lock
from tinker_algos.hub.gguf_import import (
    GGUFError,
    GGUFInfo,
    check_gguf,
    import_gguf,
    supported_architectures,
    supported_tensor_types,
)
from tinker_algos.hub.presets import (
    PRESETS,
    FetchError,
    RegistryPreset,
    fetch_preset,
    is_fetched,
    preset_dir,
)

__all__ = [
    "PRESETS",
    "FetchError",
    "GGUFError",
    "GGUFInfo",
    "ModelLoadError",
    "RegistryPreset",
    "atomic_dir",
    "cache_root",
    "check_gguf",
    "fetch_preset",
    "file_lock",
    "import_gguf",
    "is_fetched",
    "preset_dir",
    "supported_architectures",
    "supported_tensor_types",
]
