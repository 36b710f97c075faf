"""Take an export out: ``opentinker export --push-to-hub REPO`` (:func:`push_folder`).

``huggingface_hub``'s ``HfApi.create_repo`` (``exist_ok``, so a second push adds a commit) and
``HfApi.upload_folder`` do the work; the token is ``huggingface_hub``'s own (``HF_TOKEN``, else the
one ``hf auth login`` stored), and ``HF_ENDPOINT`` points it at another Hub. Failures become one
:class:`PushError` line naming ``--push-to-hub`` and the fix (a missing token, ``HF_HUB_OFFLINE``,
a refused repo).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tinker_core.errors import OpenTinkerError


class PushError(OpenTinkerError, ValueError):
    """An export that could not be pushed (the message says why and what to do)."""


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    repo_url: str
    commit_url: str


def check_push(repo_id: str) -> None:
    """Refuse, before any export work, a push that cannot happen: a malformed repo id, ``HF_HUB_OFFLINE``,
    or no token (``HF_TOKEN`` unset and no ``hf auth login``)."""
    from huggingface_hub import constants, get_token
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise PushError(f"--push-to-hub {repo_id!r}: not a repo id ({str(e).strip().splitlines()[0]}); give NAME or OWNER/NAME") from None
    if constants.HF_HUB_OFFLINE:
        raise PushError(f"--push-to-hub {repo_id}: HF_HUB_OFFLINE is set, so nothing can be uploaded; unset it to push")
    if not get_token():
        raise PushError(f"--push-to-hub {repo_id}: no Hugging Face token; set HF_TOKEN or run `hf auth login`")


def push_folder(folder: Path, repo_id: str, *, private: bool = False, message: str = "Upload with opentinker export") -> PushResult:
    """Create the model repo ``repo_id`` (if new; ``private`` then) and upload ``folder`` into it as one commit."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

    check_push(repo_id)
    api = HfApi()
    try:
        repo = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        info = api.upload_folder(folder_path=str(folder), repo_id=repo.repo_id, repo_type="model", commit_message=message)
    except LocalTokenNotFoundError:  # the token went between check_push and now
        raise PushError(f"--push-to-hub {repo_id}: no Hugging Face token; set HF_TOKEN or run `hf auth login` (the export is in {folder})") from None
    except OfflineModeIsEnabled:
        raise PushError(f"--push-to-hub {repo_id}: HF_HUB_OFFLINE is set, so nothing can be uploaded; unset it (the export is in {folder})") from None
    except (HfHubHTTPError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PushError(f"--push-to-hub {repo_id}: the Hub refused the upload ({first}); check the repo id and that "
                        f"your token may write to it (the export is in {folder})") from None
    return PushResult(repo_id=repo.repo_id, repo_url=str(repo), commit_url=info.commit_url)


__all__ = ["PushError", "PushResult", "check_push", "push_folder"]
