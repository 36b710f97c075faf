"""Route: the files behind signed external weights URLs (:mod:`tinker_scheduler.tinker_api.downloads`).

No API key: the URL's signature is the credential (``urllib`` fetches it as the SDK's download
does). The file streams from disk; nothing is read into memory."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from tinker_scheduler.tinker_api.downloads import PREFIX
from tinker_scheduler.tinker_api.routes.context import context

router = APIRouter(prefix=PREFIX)


@router.get("/{model_id}/{name}/{file:path}")
async def external_weights_file(request: Request, model_id: str, name: str, file: str, expires: str = "",
                                signature: str = "") -> FileResponse:
    ctx = context(request)
    raw_path = request.scope.get("raw_path", b"").decode("latin-1") or request.url.path
    target = await run_in_threadpool(ctx.downloads.file, raw_path, model_id, name, file, expires, signature)
    return FileResponse(target, media_type="application/octet-stream")
