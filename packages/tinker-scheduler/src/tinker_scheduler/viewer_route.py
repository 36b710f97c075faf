"""The run viewer of each tenant's jobs on the scheduler's serve route (``scheduler start --serve-port``).

``/viewer/jobs/<job_id>/`` is the page of ``opentinker view`` (tinker-client's viewer) for
that job's run directory (curves, rollouts, eval transcripts, config, checkpoints, phases), and
``/viewer/jobs/<job_id>/api/...`` its JSON API:

- the API takes the tenant's key as every other scheduler call does (``Authorization: Bearer KEY``
  or ``X-API-Key: KEY``; the Tinker SDK's ``tml-`` prefix is accepted), checked by
  :func:`tinker_scheduler.auth.authenticate`; the page asks for the key once and keeps it in the
  tab's session storage;
- another tenant's job is 404 with the same text as a job that does not exist;
- the page and its static files hold no data and are the same for every job id, so they are
  served without a key (the browser cannot send one with a page load).

The viewer reads the run directory while the job writes it, as ``opentinker view`` does; one
viewer app per job is kept (at most :data:`MAX_APPS`, the least recently used dropped).

Layering: the viewer is tinker-client's, which the scheduler may not import; tinker-client
registers it as the ``viewer`` HTTP front (:mod:`tinker_core.http_fronts`), found in the plugin
registry on the first viewer request. Without it (or without FastAPI) the route answers 501
naming what to install.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from tinker_scheduler.auth import AuthError, AuthMode, authenticate
from tinker_scheduler.store import JobStore
from tinker_scheduler.tinker_api.auth import KEY_PREFIX as TINKER_KEY_PREFIX
from tinker_scheduler.tinker_api.auth import api_key_of

__all__ = ["MAX_APPS", "PREFIX", "ViewerFront"]

#: Where the viewer is mounted; a job's page is ``PREFIX + job_id + "/"``.
PREFIX = "/viewer/jobs/"
#: Viewer apps (one per job) kept at once.
MAX_APPS = 64
_MISSING = "the run viewer is not installed on this scheduler"
_INSTALL = "install tinker-client[view] beside tinker-scheduler"


async def _answer(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers]})
    await send({"type": "http.response.body", "body": data})


class ViewerFront:
    """An ASGI app: the viewer under :data:`PREFIX` (see the module docstring); every other
    request (and the lifespan) goes to ``fallback`` (404 when None)."""

    def __init__(self, store: JobStore, auth: AuthMode, fallback: Any = None) -> None:
        self.store, self.auth, self.fallback = store, auth, fallback
        self._apps: OrderedDict[str, Any] = OrderedDict()
        self._page: Any = None
        self._lock = threading.Lock()

    @property
    def state(self) -> Any:
        """The wrapped app's ``state`` (the serve route's backend), as the route's server exposed
        it before the viewer wrapped the app."""
        return getattr(self.fallback, "state", None)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith(PREFIX):
            if self.fallback is not None:
                await self.fallback(scope, receive, send)
            elif scope["type"] == "http":
                await _answer(send, 404, {"detail": f"not found: the viewer is under {PREFIX}<job_id>/"})
            return
        job_id, slash, rest = path[len(PREFIX):].partition("/")
        if not slash:  # the page's relative links need the trailing slash
            query = scope.get("query_string", b"").decode("latin-1")
            location = f"{scope.get('root_path', '')}{PREFIX}{job_id}/" + (f"?{query}" if query else "")
            await _answer(send, 307, {"detail": f"see {location}"}, [(b"location", location.encode("latin-1"))])
            return
        try:
            app = self._job_app(job_id, scope) if rest.startswith("api/") else self._page_app()
        except _Refused as e:
            await _answer(send, e.status, {"detail": e.detail})
            return
        mounted = f"{PREFIX}{job_id}"
        sub = dict(scope, path="/" + rest, raw_path=("/" + rest).encode(), root_path=scope.get("root_path", "") + mounted)
        await app(sub, receive, send)

    def _front(self, runs: list[tuple[Path, str]]) -> Any:
        """tinker-client's ``viewer`` HTTP front over ``runs`` (501 naming the package when missing)."""
        from tinker_core.http_fronts import VIEWER
        from tinker_core.registry import get_registry

        fronts = get_registry("http_fronts")
        if VIEWER not in fronts:
            raise _Refused(501, f"{_MISSING} (no plugin registers the {VIEWER!r} HTTP front): {_INSTALL}")
        try:
            return fronts.get(VIEWER).obj(runs)
        except ImportError as e:
            raise _Refused(501, f"{_MISSING} ({e}): {_INSTALL}") from None

    def _page_app(self) -> Any:
        with self._lock:
            if self._page is None:
                self._page = self._front([])
            return self._page

    def _job_app(self, job_id: str, scope: dict[str, Any]) -> Any:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        key = api_key_of(headers).removeprefix(TINKER_KEY_PREFIX)
        try:
            tenant = authenticate(self.store, self.auth, [("x-api-key", key)] if key else [])
        except AuthError as e:
            raise _Refused(401, str(e).replace("the metadata ", "the header ", 1)) from None
        job = self.store.get(job_id, tenant)  # another tenant's job reads as a missing one
        if job is None:
            raise _Refused(404, f"no job {job_id!r}: list your jobs with `opentinker list`")
        with self._lock:
            app = self._apps.get(job.id)
            if app is None:
                app = self._front([(Path(job.run_dir), job.id)])
                self._apps[job.id] = app
                while len(self._apps) > MAX_APPS:
                    self._apps.popitem(last=False)
            self._apps.move_to_end(job.id)
            return app


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail
