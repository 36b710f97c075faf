"""Checkpoints: weights (or one adapter), optimizer, RNG, step and data cursor, written atomically.

Layout of a checkpoint directory::

    manifest.json      format version, step, contents, base model, adapter, trainer config,
                       data cursor, library versions, and the size and SHA-256 of every other
                       file (``files``); written last
    model/             full fine-tuning: ``save_pretrained`` of the model + tokenizer
                       (``AutoModelForCausalLM.from_pretrained(ckpt / "model")`` loads it)
    adapter/           LoRA: peft ``save_pretrained`` of the trained adapter
                       (``PeftModel.from_pretrained(base, ckpt / "adapter")`` loads it)
    trainer_state.pt   optimizer state dict, step, skipped_steps (and the fp16 grad scaler)
    rng_state.pt       python ``random``, numpy global, torch CPU (and CUDA) generator states

Everything is written into a temporary sibling directory which is then renamed into place, so a
reader never sees a half-written checkpoint; the files are flushed to disk before the rename.
:func:`verify` checks a checkpoint against its manifest's checksums (a byte flipped, a file
truncated or missing), so a resume can skip a damaged one; :func:`seal` gives any checkpoint
directory (e.g. a run's ``checkpoints/step-N/``) such a manifest. Checkpoints written before
manifests carried checksums have no ``files`` and load unverified. Skipped (NaN/inf) updates are never applied, so a
checkpoint always holds the last good weights; :func:`save_state` also refuses to write
non-finite weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypedDict

import numpy as np
import torch

from tinker_algos.model.models import PolicyModel, atomic_dir
from tinker_algos.training.trainer_config import TrainerConfig

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
KIND = "opentinker-checkpoint"


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or does not fit the trainer it is loaded into."""


class Checkpointable(Protocol):
    """The trainer a checkpoint is written from or loaded into: a :class:`tinker_algos.training.trainer.Trainer`."""

    policy: PolicyModel
    adapter: str | None
    config: TrainerConfig
    step: int
    skipped_steps: int
    params: list[torch.nn.Parameter]
    param_names: list[str]

    @property
    def device(self) -> torch.device: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any], *, with_optimizer: bool = True) -> None: ...

    def zero_grad(self) -> None: ...


def get_rng_state() -> dict[str, Any]:
    """Python, numpy and torch (CPU, every CUDA device) RNG states."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of checkpoint ``path`` (checked for kind and format version)."""
    manifest = _read_json_manifest(Path(path))
    f = Path(path) / MANIFEST
    if manifest.get("kind") != KIND:
        raise CheckpointError(f"{f} is not an OpenTinker checkpoint manifest (kind={manifest.get('kind')!r})")
    if manifest.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {manifest['format_version']}, newer than this "
            f"tinker-algos understands ({FORMAT_VERSION}); upgrade tinker-algos"
        )
    return manifest


def _read_json_manifest(path: Path) -> dict[str, Any]:
    f = path / MANIFEST
    if not f.exists():
        raise CheckpointError(f"{path} is not a checkpoint: it has no {MANIFEST}")
    return read_json_object(f, CheckpointError, "a checkpoint manifest (a JSON object)")


def read_json_object(f: Path, error: type[Exception], what: str = "a JSON object") -> dict[str, Any]:
    """The JSON object in file ``f`` (a manifest, a run's ``config.json`` ...); an ``error``
    naming the file when it is unreadable or holds something other than ``what``."""
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise error(f"{f} is unreadable: {e}") from e
    if not isinstance(data, dict):
        raise error(f"{f} is not {what}")
    return data


def _digest(f: Path) -> tuple[int, str]:
    """Size and SHA-256 of file ``f``, flushed to disk on the way (fsync)."""
    h = hashlib.sha256()
    size = 0
    with f.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
        os.fsync(fh.fileno())
    return size, h.hexdigest()


class FileDigest(TypedDict):
    """One file's entry in a manifest's ``files``: its size in bytes and its SHA-256 (hex)."""

    size: int
    sha256: str


def file_digests(root: Path) -> dict[str, FileDigest]:
    """``{relative/posix/path: {"size", "sha256"}}`` of every file under ``root`` but its manifest.

    A subdirectory with a manifest of its own (a sealed checkpoint inside, e.g. a run's
    ``trainer/``) is covered by that manifest alone: its other files were hashed when it was
    sealed, and :func:`verify` checks them through it, so they are not hashed twice.
    """
    out: dict[str, FileDigest] = {}
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = f.relative_to(root)
        if rel.as_posix() == MANIFEST:
            continue
        sealed = [d for d in rel.parents if d != Path(".") and (root / d / MANIFEST).is_file()]
        if sealed and rel != sealed[0] / MANIFEST:
            continue
        size, sha = _digest(f)
        out[rel.as_posix()] = {"size": size, "sha256": sha}
    return out


def seal(path: Path, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest`` plus ``files`` (:func:`file_digests`) as ``path/manifest.json``.

    Call it last, when every other file of the checkpoint directory is written.
    """
    f = path / MANIFEST
    with f.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({**manifest, "files": file_digests(path)}, indent=2, sort_keys=True))
        fh.flush()
        os.fsync(fh.fileno())


def verify(path: str | Path, _shown: str = "") -> bool:
    """Check checkpoint directory ``path`` against the checksums in its manifest.

    Returns True when every file the manifest lists is there with its size and SHA-256, False
    for a checkpoint written before manifests carried checksums (nothing to check). Raises
    :class:`CheckpointError` naming the first file that is missing, truncated or changed, or
    when the manifest itself is missing or unreadable. A sealed subdirectory (listed by its own
    manifest) is checked through that manifest.
    """
    path = Path(path)
    files = _read_json_manifest(path).get("files")
    if files is None:
        return False
    if not isinstance(files, dict):
        raise CheckpointError(f"{path / MANIFEST} is damaged: 'files' is not a mapping")
    for rel, want in sorted(files.items()):
        if not isinstance(want, dict):
            raise CheckpointError(f"{path / MANIFEST} is damaged: no size and checksum for {rel}")
        f = path / rel
        if not f.is_file():
            raise CheckpointError(f"{_shown}{rel} is missing")
        size = f.stat().st_size
        if size != want.get("size"):
            raise CheckpointError(f"{_shown}{rel} has {size} bytes, the manifest says {want.get('size')} (truncated or rewritten)")
        if _digest(f)[1] != want.get("sha256"):
            raise CheckpointError(f"{_shown}{rel} does not match its SHA-256 checksum (corrupted)")
    for rel in sorted(files):
        inner = Path(rel)
        if inner.name == MANIFEST and inner.parent != Path("."):
            verify(path / inner.parent, f"{_shown}{inner.parent.as_posix()}/")
    return True


def _versions() -> dict[str, str]:
    import peft
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}


def save_state(
    path: str | Path,
    trainer: Checkpointable,
    *,
    data_cursor: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``trainer``'s full state to ``path`` atomically; return the path.

    Args:
        path: the checkpoint directory (its parent is created if needed).
        trainer: weights (the whole model, or just ``trainer.adapter``), optimizer, step.
        data_cursor: any JSON-able dict (e.g. epoch and index into the dataset); returned in the
            manifest by :func:`load_state`.
        overwrite: replace an existing checkpoint at ``path``.

    Gradients accumulated since the last ``optim_step`` are not saved.
    """
    cursor = dict(data_cursor or {})
    try:
        json.dumps(cursor)
    except TypeError as e:
        raise CheckpointError(f"data_cursor must be JSON-serialisable: {e}") from e
    for name, p in zip(trainer.param_names, trainer.params, strict=True):
        if not torch.isfinite(p.detach()).all():
            raise CheckpointError(f"parameter {name} holds NaN/inf; refusing to checkpoint broken weights")
    policy = trainer.policy
    adapter = trainer.adapter
    lora = policy.lora_specs.get(adapter) if adapter is not None else None
    manifest: dict[str, Any] = {
        "kind": KIND,
        "format_version": FORMAT_VERSION,
        "step": trainer.step,
        "skipped_steps": trainer.skipped_steps,
        "contents": [],
        "base_model": policy.model_id,
        "adapter_name": adapter,
        "adapter_config": lora.to_dict() if lora is not None else None,
        "trainer_config": trainer.config.to_dict(),
        "data_cursor": cursor,
        "device": policy.spec.to_dict(),
        "versions": _versions(),
        "created_unix": time.time(),
    }

    def write(tmp: Path) -> None:
        if adapter is None:
            policy.model.save_pretrained(tmp / "model")
            policy.tokenizer.save_pretrained(tmp / "model")
            manifest["contents"].append("model")
        else:
            save_adapter(policy, adapter, tmp / "adapter")
            manifest["contents"].append("adapter")
        torch.save(trainer.state_dict(), tmp / "trainer_state.pt")
        torch.save(get_rng_state(), tmp / "rng_state.pt")
        manifest["contents"] += ["optimizer", "scheduler", "rng", "data_cursor"]
        seal(tmp, manifest)

    return atomic_dir(Path(path), write, overwrite=overwrite)


def save_adapter(policy: PolicyModel, adapter: str, target: Path) -> None:
    """peft saves non-``default`` adapters into ``<dir>/<name>/``; put the files at ``target``."""
    staging = target.parent / ".adapter-staging"
    policy.model.save_pretrained(str(staging), selected_adapters=[adapter])
    src = staging / adapter if (staging / adapter / "adapter_config.json").exists() else staging
    src.rename(target)
    if staging.exists():
        import shutil

        shutil.rmtree(staging)


def load_state(
    path: str | Path, trainer: Checkpointable, *, with_optimizer: bool = True, check: bool = True
) -> dict[str, Any]:
    """Restore checkpoint ``path`` into ``trainer`` in place; return the manifest.

    Weights are always restored (the full model, or ``trainer.adapter`` -- the checkpoint must be
    of the same kind). With ``with_optimizer`` (the default) the optimizer state, step, LR
    schedule position and RNG states are restored too, so training continues exactly as if it
    had not stopped; without, only the weights change (e.g. to start a new phase).
    The caller resumes its data from ``manifest["data_cursor"]``. With ``check`` (the default)
    the files are first checked against the manifest's checksums (:func:`verify`); a caller
    that just verified them passes ``check=False``.
    """
    path = Path(path)
    manifest = read_manifest(path)
    if check:
        try:
            verify(path)
        except CheckpointError as e:
            raise CheckpointError(f"checkpoint {path} is damaged: {e}") from e
    if trainer.adapter is None:
        if "model" not in manifest["contents"]:
            raise CheckpointError(
                f"checkpoint {path} holds a LoRA adapter ({manifest.get('adapter_name')!r}) but the "
                "trainer fine-tunes the full model; build the trainer with adapter=..."
            )
        _load_full(path / "model", trainer)
    else:
        if "adapter" not in manifest["contents"]:
            raise CheckpointError(
                f"checkpoint {path} holds full model weights but the trainer trains adapter "
                f"{trainer.adapter!r}; build the trainer without adapter="
            )
        _load_adapter(path / "adapter", trainer)
    if with_optimizer:
        state = torch.load(path / "trainer_state.pt", map_location=trainer.device, weights_only=False)
        trainer.load_state_dict(state, with_optimizer=True)
        set_rng_state(torch.load(path / "rng_state.pt", weights_only=False))
    else:
        trainer.zero_grad()
    return manifest


def _load_full(model_dir: Path, trainer: Checkpointable) -> None:
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{model_dir} has no .safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    model = trainer.policy.model
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or {})
    really_missing = [k for k in missing if k not in tied]
    if unexpected or really_missing:
        raise CheckpointError(
            f"weights in {model_dir} do not fit the model {trainer.policy.model_id!r}: "
            f"missing {really_missing[:5]}, unexpected {list(unexpected)[:5]}"
        )


def _load_adapter(adapter_dir: Path, trainer: Checkpointable) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    f = adapter_dir / "adapter_model.safetensors"
    if not f.exists():
        raise CheckpointError(f"{adapter_dir} has no adapter_model.safetensors")
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    want = trainer.policy.lora_specs.get(trainer.adapter)  # type: ignore[arg-type]
    if want is not None and int(cfg.get("r", want.rank)) != want.rank:
        raise CheckpointError(
            f"adapter in {adapter_dir} has rank {cfg.get('r')}, the trainer's adapter "
            f"{trainer.adapter!r} has rank {want.rank}; build the trainer with the checkpoint's LoRA settings"
        )
    result = set_peft_model_state_dict(trainer.policy.model, load_file(str(f)), adapter_name=trainer.adapter)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise CheckpointError(f"adapter weights in {adapter_dir} do not fit: unexpected {unexpected[:5]}")
