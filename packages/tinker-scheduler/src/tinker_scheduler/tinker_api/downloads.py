"""External weights out of the gateway: signed, expiring download URLs served by the gateway itself.

The SDK's download path (``tinker checkpoint download``, the cookbook's ``weights.download``) is
``save_weights_external(name)`` -> ``tinker://<model_id>/external_weights/<name>``, then
``get_external_weights_urls(path)`` -> ``{"urls": {file: url}, "expires": time}``, one URL per file
of the export (a PEFT adapter: ``adapter_config.json`` and ``adapter_model.safetensors``), each
fetched with a plain ``urllib`` GET that carries no key. So a URL is its own credential:

    <gateway>/api/v1/external_weights/<model_id>/<name>/<file>?expires=<unix time>&signature=<hex>

``signature`` is HMAC-SHA256, under a secret the scheduler draws when it starts (:class:`Signer`),
of the URL's path and ``expires``; URLs are signed only for the caller's own checkpoints, and a
model id belongs to one tenant for good, so the path binds the URL to its owner. A changed path
(another file, another checkpoint, another tenant's), a changed time or a changed signature fails
the check (403, whether or not the checkpoint exists), an expired URL is 403 too, and a checkpoint
deleted (or expired) since its URL was signed is 404. URLs live
:data:`URL_TTL_S` at most (never past the checkpoint's own expiry) and die with the scheduler
process (the SDK signs new ones when they are about to expire). Only regular files inside the
export directory are listed and served (no links), at most :data:`MAX_FILES` of them.

An export asked for with ``age_encryption_recipients`` (what ``tinker_cookbook.weights.download``
does for a ``weights/<name>`` path) has every file encrypted to those age recipients (native
``age1...`` keys or SSH public keys, at most :data:`MAX_RECIPIENTS`) with ``pyrage``, stored with
an ``.age`` suffix; the plaintext files are removed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from tinker_scheduler.errors import StatusError
from tinker_scheduler.tinker_api import fields
from tinker_scheduler.tinker_api.records import CheckpointRecord, Records

#: Longest life of a signed download URL, seconds.
URL_TTL_S = 3600
#: A checkpoint's TTL bounds (Tinker's: one hour to ten years); None means kept until deleted.
MIN_TTL_S, MAX_TTL_S = 3600, 10 * 365 * 24 * 3600
#: The most files one external weights export lists (a PEFT adapter has two; a full model a few dozen).
MAX_FILES = 1024
#: Where the download route lives (under the gateway's own address).
PREFIX = "/api/v1/external_weights"
#: The most age recipients one export is encrypted to (Tinker's bound).
MAX_RECIPIENTS = 10
AGE_SUFFIX = ".age"
KIND = "external_weights"


class Signer:
    """HMAC-SHA256 signatures under a secret drawn when the gateway starts (or the one given)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def sign(self, path: str, expires: int) -> str:
        return hmac.new(self._secret, f"{path}\n{expires}".encode(), hashlib.sha256).hexdigest()

    def check(self, path: str, expires: int, signature: str) -> bool:
        return hmac.compare_digest(self.sign(path, expires), signature)


def ttl_of(value: object, field: str = "ttl_seconds") -> float | None:
    """A checkpoint's expiry time from a TTL field (None: kept until deleted), its bounds checked."""
    if value is None:
        return None
    ttl = fields.whole(value, field)
    if not MIN_TTL_S <= ttl <= MAX_TTL_S:
        raise StatusError("INVALID_ARGUMENT", f"{field}: must be between {MIN_TTL_S} (one hour) and {MAX_TTL_S} "
                                              f"(ten years) seconds, or null to keep the checkpoint (got {ttl})")
    return time.time() + ttl


def age_recipients(value: object, field: str = "age_encryption_recipients") -> list[object]:
    """The parsed age recipients of a save request (empty: not encrypted); a bad one is 400."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise StatusError("INVALID_ARGUMENT", f"{field}: must be a list of age recipients (strings)")
    if len(value) > MAX_RECIPIENTS:
        raise StatusError("INVALID_ARGUMENT", f"{field}: at most {MAX_RECIPIENTS} recipients (got {len(value)})")
    if not value:
        return []
    try:
        import pyrage
    except ImportError:
        raise StatusError("UNIMPLEMENTED", f"{field}: encrypted exports need pyrage on the scheduler "
                                           "(pip install 'tinker-scheduler[http]')") from None
    out = []
    for i, text in enumerate(value):
        kind = pyrage.ssh if text.startswith("ssh-") else pyrage.x25519
        try:
            out.append(kind.Recipient.from_str(text.strip()))
        except pyrage.RecipientError as e:
            raise StatusError("INVALID_ARGUMENT", f"{field}[{i}]: not an age recipient (age1... or an SSH public "
                                                  f"key): {e}") from None
    return out


def encrypt_export(directory: Path, recipients: list[object]) -> None:
    """Encrypt every file of an export to ``recipients`` (``<file>.age``), removing the plaintext."""
    import pyrage

    try:
        for file in export_files(directory):
            plain = export_root(directory) / file
            pyrage.encrypt_file(str(plain), str(plain) + AGE_SUFFIX, recipients)
            plain.unlink()
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)  # never half encrypted: no export at all
        raise


def export_root(directory: Path) -> Path:
    """The directory whose files an export downloads: the saved ``adapter/`` (or ``model/``)."""
    for sub in ("adapter", "model"):
        if (directory / sub).is_dir():
            return directory / sub
    return directory


def export_files(directory: Path) -> list[str]:
    """The export's regular files, relative to its root, sorted (links and anything else left out)."""
    root = export_root(directory).resolve()
    out: list[str] = []
    for p in sorted(root.rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        out.append(p.relative_to(root).as_posix())
        if len(out) > MAX_FILES:
            raise StatusError("FAILED_PRECONDITION", f"the export holds more than {MAX_FILES} files; "
                                                     "it cannot be downloaded through signed URLs")
    return out


@dataclass(frozen=True)
class Downloads:
    """Signs and checks the download URLs of the tenants' external weights."""

    records: Records
    signer: Signer

    def _export(self, tenant: str, model_id: str, name: str) -> CheckpointRecord:
        saved = self.records.checkpoint(tenant, model_id, KIND, name)
        if saved is None or (saved.expires_at is not None and saved.expires_at <= time.time()):
            raise StatusError("NOT_FOUND", f"checkpoint_id: no external weights {KIND}/{name} of training run {model_id!r}")
        return saved

    def urls(self, tenant: str, model_id: str, checkpoint_id: str, base_url: str) -> dict[str, object]:
        """``get_external_weights_urls``: one signed URL per file of the tenant's export."""
        kind, _, name = checkpoint_id.partition("/")
        if kind != KIND:
            raise StatusError("INVALID_ARGUMENT", f"checkpoint_id: {checkpoint_id!r} is not an external weights "
                                                  f"checkpoint ({KIND}/<name>, as save_weights_external returns)")
        saved = self._export(tenant, model_id, name)
        expires = int(time.time()) + URL_TTL_S
        if saved.expires_at is not None:
            expires = min(expires, int(saved.expires_at))
        urls = {}
        for file in export_files(Path(saved.file)):
            path = f"{PREFIX}/{quote(model_id, safe='')}/{quote(name, safe='')}/{quote(file)}"
            signature = self.signer.sign(path, expires)
            urls[file] = f"{base_url.rstrip('/')}{path}?expires={expires}&signature={signature}"
        return {"urls": urls, "expires": datetime.fromtimestamp(expires, UTC).isoformat()}

    def file(self, raw_path: str, model_id: str, name: str, file: str, expires: str, signature: str) -> Path:
        """The file a signed URL names, after its signature and time are checked (PERMISSION_DENIED
        for a bad or expired one, NOT_FOUND for a checkpoint or file that is gone)."""
        try:
            expiry = int(expires)
        except ValueError:
            raise StatusError("PERMISSION_DENIED", "expires: not a signed download URL (sign one with "
                                                   "get_external_weights_urls)") from None
        if not self.signer.check(raw_path, expiry, signature):
            raise StatusError("PERMISSION_DENIED", "signature: the URL's signature does not match it (sign a new one "
                                                   "with get_external_weights_urls)")
        if expiry < time.time():
            raise StatusError("PERMISSION_DENIED", "expires: the signed URL has expired (sign a new one with "
                                                   "get_external_weights_urls)")
        owner = self.records.checkpoint_owner(model_id, KIND, name)
        if owner is None:
            raise StatusError("NOT_FOUND", f"no external weights {KIND}/{name} of training run {model_id!r}")
        saved = self._export(owner, model_id, name)
        root = export_root(Path(saved.file)).resolve()
        target = (root / file).resolve()
        if not target.is_relative_to(root) or (root / file).is_symlink() or not target.is_file():
            raise StatusError("NOT_FOUND", f"no file {file!r} in external weights {KIND}/{name}")
        return target
