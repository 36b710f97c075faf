"""Export a trained policy for other tools: ``opentinker export`` (:mod:`tinker_algos.commands.cli_eval`).

Two layouts, each written atomically into the output directory (:func:`atomic_dir`):

* **adapter** (a LoRA run, without ``merge``): ``adapter_config.json`` and
  ``adapter_model.safetensors`` at the top (the layout ``PeftModel.from_pretrained(base, dir)``
  and vLLM's ``--lora-modules name=dir`` read), plus the tokenizer. ``base_model_name_or_path``
  is a portable name (:func:`portable_base_name`), ``target_modules`` the modules the adapter's
  weights really touch, and ``modules_to_save`` empty (vLLM refuses anything else). The ``tiny``
  preset is no name another machine (or plain peft) can resolve, so an adapter of it carries its
  base: the tiny model is saved in ``base/`` beside the adapter files, and
  ``base_model_name_or_path`` is ``base``, relative to the export, so the folder can move:
  ``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(dir / "base"), dir)`` loads it
  from anywhere, ``AutoPeftModelForCausalLM.from_pretrained(".")`` from inside it (peft resolves a
  relative base from the working directory), and ``opentinker eval``/``serve`` resolve it against
  the export.
* **full model** (``merge``, or any full fine-tuning run): ``save_pretrained`` weights
  (safetensors), ``config.json``, ``generation_config.json`` and the tokenizer;
  ``AutoModelForCausalLM.from_pretrained(dir)`` loads it. A LoRA adapter is merged into the base
  weights first (``merge_and_unload``).

The weights are the source's exactly (:func:`tinker_algos.commands.evaluation.find_source` resolves a run
directory to its newest intact checkpoint).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tinker_algos.commands.evaluation import EvalError, Source, find_source, load_policy
from tinker_algos.hub.cache import share_readable
from tinker_algos.model.model_files import TINY, atomic_dir
from tinker_core.names import is_hub_id

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
BUNDLED_BASE = "base"
"""The directory of an adapter export that holds its ``tiny`` base model (see the module docstring)."""


class ExportError(EvalError):
    """An export that cannot be written as asked (the message says why and what to do)."""


@dataclass(frozen=True)
class ExportResult:
    output: Path
    layout: Literal["adapter", "full"]
    base_model: str | None
    source: Source


def is_portable(name: str) -> bool:
    """Whether ``name`` means the same model on another machine: a hub id or the ``tiny`` preset,
    not a path (absolute, relative, or an existing local directory)."""
    if is_tiny(name):
        return True
    if name.startswith((".", "/", "~")) or Path(name).expanduser().exists():
        return False
    return is_hub_id(name)


def is_tiny(name: str) -> bool:
    """Whether ``name`` is the ``tiny`` preset (``tiny`` or ``tiny:SEED``)."""
    return name == TINY or re.fullmatch(rf"{TINY}:\d+", name) is not None


def portable_base_name(source: Source, given: str | None) -> str:
    """The ``base_model_name_or_path`` an exported adapter records: ``given`` (``--base-model``),
    else the run's ``model.name`` (or the name the source records) when it is portable."""
    if given:
        return given
    name = source.base_model or ""
    if name and is_portable(name):
        return name
    where = f"model.name {name!r}" if name else "no base model name is recorded"
    raise ExportError(
        f"{where} is not a portable name (a hub id or 'tiny'); pass --base-model NAME "
        "(the hub id the base weights came from) so the adapter does not record a local path"
    )


def check_output(output: Path, *, force: bool) -> None:
    """Refuse an output that is a file, or a non-empty directory without ``force``."""
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise ExportError(f"--output {output} exists and is not a directory")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise ExportError(f"--output {output} is not empty; pass --force to replace its contents")


def adapter_targets(weights: Path) -> list[str]:
    """The module names (last part: ``q_proj``...) an adapter's safetensors hold LoRA weights for."""
    from safetensors import safe_open

    names: set[str] = set()
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
            parts = key.split(".")
            for i, p in enumerate(parts):
                if p.startswith("lora_") and i > 0:
                    names.add(parts[i - 1])
                    break
    return sorted(names)


def _write_adapter(source: Source, base: str, tmp: Path) -> None:
    src = source.weights_dir
    config = json.loads((src / "adapter_config.json").read_text(encoding="utf-8"))
    shutil.copyfile(src / "adapter_model.safetensors", tmp / "adapter_model.safetensors")
    config.update(
        base_model_name_or_path=base,
        target_modules=adapter_targets(tmp / "adapter_model.safetensors"),
        modules_to_save=None,
        inference_mode=True,
    )
    (tmp / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _tokenizer(source: Source, base_model: str | None) -> PreTrainedTokenizerBase:
    from tinker_algos.model.tokenizer import load_tokenizer

    job = source.job
    if source.weights == "full":
        return load_tokenizer(source.weights_dir)
    if job is not None and job.model.tokenizer:
        return load_tokenizer(job.model.tokenizer)
    name = source.base_model or base_model
    if not name:
        raise ExportError(f"{source.path}: no base model is recorded to take the tokenizer from; pass --base-model NAME")
    return load_tokenizer(name)


def check_outside(output: Path, source: Source) -> None:
    """Refuse an output inside the run directory of ``source`` (or inside its weights), or one that
    contains them: writing it would change or (with ``--force``) replace what is exported."""
    from tinker_algos.records.run_dir import RUN_MARKER

    out = output.expanduser().resolve()
    weights = source.weights_dir.resolve()
    protected = [weights]
    for p in (weights, *weights.parents):
        if (p / RUN_MARKER).is_file() or ((p / "checkpoints").is_dir() and (p / "config.json").is_file()):
            protected.append(p)
            break
    for p in reversed(protected):  # the run directory first
        if out == p or p in out.parents:
            raise ExportError(f"--output {output} is inside {p}, the {'run directory' if p != weights else 'source'} being "
                              "exported; write the export somewhere else")
    for p in protected:
        if out in p.parents:
            raise ExportError(f"--output {output} contains {p}, the source being exported; write the export somewhere else")


def export(
    path: str | Path,
    output: str | Path,
    *,
    merge: bool = False,
    base_model: str | None = None,
    force: bool = False,
    progress: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> ExportResult:
    """Export the policy at ``path`` (a run directory, checkpoint or adapter) to ``output``.

    ``merge``: write a full model with the adapter merged in. A full fine-tuning source always
    gives a full model. ``base_model``: the portable name an adapter records (and, for an adapter
    without a run config, the base model to merge into). Raises :class:`ExportError` (or
    :class:`EvalError` for the source) naming what is wrong; nothing is written then.
    ``progress()`` is entered, once the request is checked, while the weights load and are written.
    """
    output = Path(output)
    source = find_source(path)
    if source.weights == "base":
        raise EvalError(f"{path} is a job config: it holds no trained weights to export; give a run directory, a checkpoint or an adapter")
    check_output(output, force=force)
    check_outside(output, source)
    layout: Literal["adapter", "full"] = "adapter" if source.weights == "adapter" and not merge else "full"
    name = portable_base_name(source, base_model) if layout == "adapter" else None
    tokenizer = _tokenizer(source, base_model) if layout == "adapter" else None
    tiny = name if name is not None and base_model is None and is_tiny(name) else None
    if tiny is not None:  # plain peft cannot resolve "tiny": the adapter records the base saved beside it
        name = BUNDLED_BASE  # relative to the export, so moving the folder keeps it loadable

    def write(tmp: Path) -> None:
        if layout == "adapter":
            assert name is not None
            _write_adapter(source, name, tmp)
            tokenizer.save_pretrained(str(tmp))
            if tiny is not None:
                from tinker_algos.model.model_files import resolve_model

                shutil.copytree(resolve_model(tiny), tmp / BUNDLED_BASE)
            share_readable(tmp)
            return
        # a run's adapter goes onto the run's model; a lone adapter onto --base-model when given
        policy, adapter = load_policy(source, base_model=base_model if source.job is None else None, device="cpu")
        model = policy.model.merge_and_unload() if adapter is not None else policy.model
        model.save_pretrained(str(tmp), safe_serialization=True)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(str(tmp))
        policy.tokenizer.save_pretrained(str(tmp))
        share_readable(tmp)  # readable by whoever serves it (the weights file may come out 0600)

    if output.is_dir() and not any(output.iterdir()):
        output.rmdir()  # an empty directory given as the target is replaced like a new one
    with progress():
        atomic_dir(output, write, overwrite=force)
    return ExportResult(output=output, layout=layout, base_model=name, source=source)


__all__ = ["ADAPTER_FILES", "BUNDLED_BASE", "ExportError", "ExportResult", "adapter_targets", "check_output", "export", "is_portable", "is_tiny", "portable_base_name"]
