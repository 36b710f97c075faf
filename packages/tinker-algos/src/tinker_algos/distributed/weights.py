"""Versioned weight records: what a learner publishes after an update and a rollout worker loads.

A :class:`WeightRecord` is the trainable tensors (only the adapter's for a LoRA job, every weight
for full fine-tuning) of one version, serialised with safetensors, and a
:class:`WeightManifest`: the version, the SHA-256 of the serialised bytes, their size and the
tensor names. Two facts make the sync check meaningful:

* :func:`unpack` refuses bytes whose SHA-256 is not the manifest's (a damaged transfer);
* :func:`params_digest` hashes what a model *holds* -- its parameters serialised the same way --
  so a worker reporting the digest of its own parameters after a load proves the weights reached
  the model, not just the process (an adapter that "loaded" but was never applied, or a load
  that silently kept old weights, gives another digest).

Records travel through Ray's object store; :class:`WeightDirectory` keeps the newest ones on
disk as the durable path (``<root>/v-<version>/`` with ``weights.safetensors``,
``manifest.json`` and a ``COMPLETE`` marker written last), from which a restarted worker
catches up without the learner.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from tinker_algos.hub.cache import atomic_dir
from tinker_core.engines import WeightSyncError as WeightSyncError

MARKER = "COMPLETE"
WEIGHTS_FILE = "weights.safetensors"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class WeightManifest:
    """What a record holds: ``version`` (updates applied since the job began), ``sha256`` and
    ``nbytes`` of the serialised tensors, their ``names`` and ``kind`` (``adapter`` or ``full``)."""

    version: int
    sha256: str
    nbytes: int
    names: tuple[str, ...]
    kind: str

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "names": list(self.names)}, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WeightManifest:
        d = json.loads(text)
        return cls(int(d["version"]), str(d["sha256"]), int(d["nbytes"]), tuple(d["names"]), str(d["kind"]))


@dataclass(frozen=True)
class WeightRecord:
    """One version's tensors as safetensors bytes, with their manifest."""

    manifest: WeightManifest
    payload: bytes

    @property
    def version(self) -> int:
        return self.manifest.version


def _cpu(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {name: t.detach().to("cpu").contiguous() for name, t in named}


def pack(named: Iterable[tuple[str, torch.Tensor]], *, version: int, kind: str) -> WeightRecord:
    """The record of ``named`` tensors (copied to the CPU) as ``version``."""
    tensors = _cpu(named)
    payload = st_save(tensors)
    manifest = WeightManifest(version, hashlib.sha256(payload).hexdigest(), len(payload), tuple(sorted(tensors)), kind)
    return WeightRecord(manifest, payload)


def unpack(record: WeightRecord) -> dict[str, torch.Tensor]:
    """The record's tensors, after checking its bytes against its manifest."""
    digest = hashlib.sha256(record.payload).hexdigest()
    if digest != record.manifest.sha256:
        raise WeightSyncError(
            f"weight record v{record.version}: its bytes hash to {digest[:12]}, its manifest says "
            f"{record.manifest.sha256[:12]} (damaged in transfer)"
        )
    return st_load(record.payload)


def params_digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 of ``named`` tensors serialised as :func:`pack` does: equal to a record's
    ``sha256`` exactly when the tensors are the record's, bit for bit."""
    return hashlib.sha256(st_save(_cpu(named))).hexdigest()


def copy_into(params: dict[str, torch.nn.Parameter], tensors: dict[str, torch.Tensor]) -> None:
    """Copy ``tensors`` into the same-named ``params`` in place; a missing or extra name, or another
    shape, is an error naming it (a record for another model or adapter)."""
    missing, extra = sorted(set(tensors) - set(params)), sorted(set(params) - set(tensors))
    if missing or extra:
        raise WeightSyncError(
            f"weight record does not fit this model: {len(missing)} tensors it lacks (e.g. {missing[:2]}), "
            f"{len(extra)} it has that the record lacks (e.g. {extra[:2]})"
        )
    with torch.no_grad():
        for name, t in tensors.items():
            p = params[name]
            if tuple(p.shape) != tuple(t.shape):
                raise WeightSyncError(f"weight record: {name} has shape {tuple(t.shape)}, the model's is {tuple(p.shape)}")
            p.copy_(t.to(device=p.device, dtype=p.dtype))


class WeightDirectory:
    """The durable copies of the newest records: ``<root>/v-<version>/``, complete once its
    ``COMPLETE`` marker exists (written after the tensors and the manifest, in a temp dir
    renamed into place)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, version: int) -> Path:
        return self.root / f"v-{version:08d}"

    def write(self, record: WeightRecord) -> Path:
        def fill(tmp: Path) -> None:
            (tmp / WEIGHTS_FILE).write_bytes(record.payload)
            (tmp / MANIFEST_FILE).write_text(record.manifest.to_json(), encoding="utf-8")
            (tmp / MARKER).write_text("", encoding="utf-8")

        return atomic_dir(self.path(record.version), fill, overwrite=True)

    def versions(self) -> list[int]:
        """The complete versions on disk, oldest first."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            if p.name.startswith("v-") and p.name[2:].isdigit() and (p / MARKER).is_file():
                found.append(int(p.name[2:]))
        return sorted(found)

    def read(self, version: int) -> WeightRecord:
        """Version ``version``'s record (checked against its manifest by :func:`unpack` on use)."""
        d = self.path(version)
        if not (d / MARKER).is_file():
            raise WeightSyncError(f"no complete weight record v{version} under {self.root}")
        manifest = WeightManifest.from_json((d / MANIFEST_FILE).read_text(encoding="utf-8"))
        return WeightRecord(manifest, (d / WEIGHTS_FILE).read_bytes())

    def retire(self, keep_from: int) -> None:
        """Delete the records older than ``keep_from``."""
        if not self.root.is_dir():
            return
        for p in self.root.iterdir():
            if p.name.startswith("v-") and p.name[2:].isdigit() and int(p.name[2:]) < keep_from:
                shutil.rmtree(p, ignore_errors=True)
