"""Turn a GGUF file into an ordinary Hugging Face model directory.

:func:`import_gguf` does, in order:

1. checks the file with the ``gguf`` package before anything heavy loads: it exists, starts with
   the GGUF magic bytes, its header parses, every tensor's data lies inside the file, its
   architecture is one transformers' GGUF loader supports (:func:`supported_architectures`) and
   every tensor type can be dequantised (:func:`check_gguf`). Each failure is one
   :class:`GGUFError` line naming the file;
2. loads tokenizer and model with ``from_pretrained(dir, gguf_file=name, dtype=torch.float32)``
   (transformers dequantises every tensor to fp32; the file is parsed once, its reader shared by
   the check, the tokenizer, the config and the weights);
3. copies the weights into a model built afresh from the same config without
   ``quantization_config`` (a GGUF-loaded model refuses ``save_pretrained``);
4. writes safetensors, the tokenizer with its chat template and a generation config whose
   ``eos_token_id`` lists the tokenizer's end-of-sequence token and the chat template's
   end-of-turn token (``<|im_end|>``, ``<|eot_id|>``, ...), plus ``opentinker.json`` (where it
   came from) -- all into a temp dir renamed into place, so a failed import leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_algos.hub.cache import ModelLoadError, atomic_dir, share_readable

if TYPE_CHECKING:
    from transformers import (
        GenerationConfig,
        PretrainedConfig,
        PreTrainedModel,
        PreTrainedTokenizerBase,
    )

GGUF_MAGIC = b"GGUF"
IMPORT_FORMAT_VERSION = 1
"""Bumped when an import writes something different; cached presets are then re-imported."""
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>")
"""End-of-turn tokens looked for in a chat template (generation stops on each one it contains)."""
NOT_CAUSAL = {"general", "tokenizer", "t5", "umt5"}
GGUF_ARCH_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: called as an import or a download advances; ``done`` and
``total`` count within the stage (bytes for ``download``, tensors for ``weights``, else 0/1)."""
STAGES = ("check", "tokenizer", "weights", "save")
"""The stages of :func:`import_gguf`, in order."""


class GGUFError(ModelLoadError):
    """A GGUF file that cannot be imported; the one-line message names the file and the problem."""


@dataclass(frozen=True)
class GGUFInfo:
    """What :func:`check_gguf` learnt from a GGUF header."""

    path: Path
    architecture: str
    tensor_types: tuple[str, ...]
    tensors: int


def supported_architectures() -> list[str]:
    """The GGUF architectures transformers' loader turns into causal LMs (``llama``, ``qwen2``...)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in NOT_CAUSAL)


def _can_dequantize(qtype: Any) -> bool:
    import numpy as np
    from gguf import GGML_QUANT_SIZES
    from gguf.quants import dequantize

    _, type_size = GGML_QUANT_SIZES[qtype]
    try:
        dequantize(np.zeros((1, type_size), dtype=np.uint8), qtype)
    except NotImplementedError:
        return False
    return True


def supported_tensor_types() -> list[str]:
    """The GGML tensor types (quantisations) the installed ``gguf`` package can dequantise."""
    from gguf import GGMLQuantizationType

    return [t.name for t in GGMLQuantizationType if _can_dequantize(t)]


def check_magic(gguf_file: str | Path) -> Path:
    """The path, when it is a file starting with the GGUF magic bytes (a cheap first check)."""
    path = Path(gguf_file).expanduser()
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise GGUFError(f"GGUF file {path} {what}")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise GGUFError(f"{path} is not a GGUF file (it does not start with the bytes 'GGUF')")
    return path


def check_gguf(gguf_file: str | Path) -> GGUFInfo:
    """Read ``gguf_file``'s header with the ``gguf`` package; raise :class:`GGUFError` when
    transformers could not import it (see the module docstring)."""
    path = check_magic(gguf_file)
    from gguf import GGUFReader

    size = path.stat().st_size
    check_declared_sizes(path)  # before the gguf package allocates or loops over what a header declares
    try:
        reader = GGUFReader(path)
        field = reader.fields.get("general.architecture")
        arch = str(field.contents()) if field is not None else ""
        tensors = list(reader.tensors)
    except Exception as e:  # any parse failure: truncated, damaged, or a newer format
        raise GGUFError(f"{path}: its GGUF header cannot be read (truncated or damaged? {_first_line(e)})") from None
    for t in tensors:
        if t.data_offset + t.n_bytes > size:
            raise GGUFError(f"{path} is truncated: tensor {t.name!r} ends past the end of the file ({size} bytes)")
    if not arch:
        raise GGUFError(f"{path} has no general.architecture in its GGUF header")
    supported = supported_architectures()
    if GGUF_ARCH_ALIASES.get(arch, arch) not in supported:
        raise GGUFError(
            f"{path}: architecture {arch!r} is not supported by transformers' GGUF loader; "
            f"supported: {', '.join(supported)}"
        )
    types = sorted({t.tensor_type for t in tensors}, key=lambda q: q.value)
    bad = [q.name for q in types if not _can_dequantize(q)]
    if bad:
        raise GGUFError(
            f"{path}: quantisation type(s) {', '.join(bad)} cannot be dequantised; "
            f"supported: {', '.join(supported_tensor_types())}"
        )
    return GGUFInfo(path, arch, tuple(q.name for q in types), len(tensors))


#: Bytes of each GGUF scalar value type (``GGUFValueType``); 8 is STRING, 9 ARRAY.
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _MAX_DIMS = 8, 9, 8


def check_declared_sizes(gguf_file: str | Path) -> None:
    """Walk a GGUF header and refuse (:class:`GGUFError`) any count or length it declares that the
    file is too small to hold: a string, an array (``2^60`` elements would have the ``gguf``
    package loop for ever), the number of keys or tensors, a tensor's dimensions. Nothing is
    allocated by what the header says; strings and arrays are skipped, not read."""
    import mmap
    import struct

    path = Path(gguf_file)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        size = len(buf)
        (version,) = struct.unpack_from("<I", buf, 4) if size >= 8 else (0,)
        order = "<" if version & 0xFFFF else ">"  # the gguf package reads byte-swapped files too
        at = 8

        def bad(what: str) -> GGUFError:
            return GGUFError(f"{path}: its GGUF header declares {what}, more than the file's {size} bytes hold "
                             "(truncated or damaged?)")

        def take(fmt: str, what: str) -> int:
            nonlocal at
            n = struct.calcsize(fmt)
            if at + n > size:
                raise bad(what)
            (value,) = struct.unpack_from(order + fmt, buf, at)
            at += n
            return int(value)

        def skip(n: int, what: str) -> None:
            nonlocal at
            if n < 0 or at + n > size:
                raise bad(what)
            at += n

        def value(kind: int, what: str, depth: int = 0) -> None:
            if kind in _SCALAR_BYTES:
                skip(_SCALAR_BYTES[kind], what)
            elif kind == _STRING:
                skip(take("Q", what), f"a string of that length in {what}")
            elif kind == _ARRAY and depth < 4:
                item, count = take("I", what), take("Q", what)
                least = _SCALAR_BYTES.get(item, 8 if item == _STRING else 12)
                if count * least > size - at:
                    raise bad(f"an array of {count} elements in {what}")
                if item in _SCALAR_BYTES:
                    skip(count * least, what)
                else:
                    for _ in range(count):
                        value(item, what, depth + 1)
            else:
                raise GGUFError(f"{path}: its GGUF header has a value of unknown type {kind} in {what}")

        tensors, keys = take("Q", "a tensor count"), take("Q", "a key count")
        if keys * 12 > size - at or tensors * 24 > size - at:
            raise bad(f"{keys} keys and {tensors} tensors")
        for i in range(keys):
            name_len = take("Q", f"key {i}")
            skip(name_len, f"a key name of {name_len} bytes")
            value(take("I", f"key {i}"), f"key {i}")
        for i in range(tensors):
            name_len = take("Q", f"tensor {i}")
            skip(name_len, f"a tensor name of {name_len} bytes")
            dims = take("I", f"tensor {i}")
            if dims > _MAX_DIMS:
                raise GGUFError(f"{path}: its GGUF header gives tensor {i} {dims} dimensions (at most {_MAX_DIMS})")
            elements = 1
            for _ in range(dims):
                elements *= take("Q", f"tensor {i}'s dimensions")
            if elements > 8 * size:  # no GGUF type stores a weight in less than a bit
                raise bad(f"tensor {i} of {elements} elements")
            skip(12, f"tensor {i}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


@contextlib.contextmanager
def _one_reader_per_file() -> Iterator[None]:
    """Parse each GGUF file once while the block runs: the header check, the tokenizer, the config
    and the weights each construct a ``gguf.GGUFReader`` (about 10 s apiece for SmolLM2's 49k-token
    vocabulary on this machine); they get the same read-only reader instead."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], gguf.GGUFReader] = {}

    def shared(path: str | os.PathLike[str], mode: str = "r") -> gguf.GGUFReader:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        gguf.GGUFReader = original  # type: ignore[misc]


@contextlib.contextmanager
def _quiet_transformers(report: Progress) -> Iterator[None]:
    """No tqdm bars or warnings from transformers while it works; its per-tensor dequantisation
    loop reports to ``report("weights", i, n)`` instead (the caller draws the progress)."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    def reporting(items: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        items = list(items)
        for i, item in enumerate(items):
            report("weights", i, len(items))
            yield item

    bars = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    original = getattr(gguf_utils, "tqdm", None)
    if original is not None:
        gguf_utils.tqdm = reporting  # type: ignore[assignment]
    try:
        yield
    finally:
        if original is not None:
            gguf_utils.tqdm = original
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def end_of_turn_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The ids generation should stop on: the tokenizer's eos and the chat template's end-of-turn
    token(s), in that order, without repeats."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
    vocab = tokenizer.get_vocab()
    for tok in END_OF_TURN_TOKENS:
        if tok in template and tok in vocab and vocab[tok] not in ids:
            ids.append(int(vocab[tok]))
    return ids


def import_gguf(
    gguf_file: str | Path,
    output_dir: str | Path,
    *,
    progress: Progress | None = None,
    overwrite: bool = False,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Import ``gguf_file`` into ``output_dir`` (a Hugging Face directory, fp32 safetensors).

    ``progress(stage, done, total)`` follows the :data:`STAGES` (the first call comes once the
    file is known to be GGUF). Raises :class:`GGUFError` for a file that cannot be imported and
    ``FileExistsError`` when ``output_dir`` exists and ``overwrite`` is false. ``metadata`` is
    added to the ``opentinker.json`` written beside the model. Returns the path.
    """
    report = progress or (lambda stage, done, total: None)
    output = Path(output_dir).expanduser()
    if output.exists() and not overwrite:
        raise FileExistsError(f"{output} already exists; choose another --output or pass --force")
    check_magic(gguf_file)  # before any progress: a missing or non-GGUF file is an error line alone
    with _one_reader_per_file():
        return _import(gguf_file, output, report, overwrite=overwrite, metadata=metadata)


def _import(gguf_file: str | Path, output: Path, report: Progress, *, overwrite: bool, metadata: dict[str, Any] | None) -> Path:
    started = time.perf_counter()
    report("check", 0, 1)
    info = check_gguf(gguf_file)
    report("check", 1, 1)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where, name = str(info.path.parent), info.path.name
    with _quiet_transformers(report):
        report("tokenizer", 0, 1)
        try:
            tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
            report("tokenizer", 1, 1)
            report("weights", 0, info.tensors)
            loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
        except (OSError, ValueError, KeyError, RuntimeError, NotImplementedError) as e:
            raise GGUFError(f"{info.path}: transformers could not load it ({_first_line(e)})") from None
        report("weights", info.tensors, info.tensors)
        report("save", 0, 1)
        model = _unquantized_copy(loaded)
        del loaded
        eos_ids = end_of_turn_ids(tokenizer)
        model.generation_config = _generation_config(model.config, tokenizer, eos_ids)

        def write(tmp: Path) -> None:
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            meta = {
                "imported_from": info.path.name,
                "format": "gguf",
                "import_format_version": IMPORT_FORMAT_VERSION,
                "architecture": info.architecture,
                "tensor_types": list(info.tensor_types),
                "eos_token_ids": eos_ids,
                "seconds": round(time.perf_counter() - started, 1),
                **(metadata or {}),
            }
            (tmp / "opentinker.json").write_text(json.dumps(meta, indent=2))
            share_readable(tmp)  # the weights file may come out 0600

        atomic_dir(output, write, overwrite=overwrite)
    report("save", 1, 1)
    return output


def _unquantized_copy(loaded: PreTrainedModel) -> PreTrainedModel:
    """A model built from ``loaded``'s config without ``quantization_config``, with its weights."""
    import torch
    from transformers import AutoModelForCausalLM

    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.random.fork_rng(devices=[]):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    return model


def _generation_config(config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase, eos_ids: list[int]) -> GenerationConfig:
    """The model's generation config, stopping on every id of ``eos_ids``."""
    from transformers import GenerationConfig

    generation = GenerationConfig.from_model_config(config)
    generation.eos_token_id = eos_ids if len(eos_ids) != 1 else eos_ids[0]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos_ids[0] if eos_ids else None)
    if pad is not None:
        generation.pad_token_id = int(pad)
    return generation
