"""The viewer's FastAPI app: the page (``/``, ``/static/...``) and a JSON API under ``/api``.

Only the run dirs given to :func:`create_app` are served, each by its number in that list
(``/api/runs/0/...``): no route takes a path, so nothing outside them can be reached; a compare
report's ``report.json`` adds only job run dirs inside the report dir (:func:`load_runs`), and no
file is read through a link out of its run dir (:mod:`tinker_client.viewer.files`). A file the
viewer cannot read is skipped and named in the run's ``warnings`` (the page shows them), never a
500. With ``allowed_hosts`` a request whose ``Host`` header is not one of them is refused (421),
so that a web page whose name is made to resolve to this machine (DNS rebinding) cannot read the
runs; ``opentinker view`` allows the localhost names and its bound address
(:func:`host_allowlist`). The page is served with a Content-Security-Policy that runs no inline
script, and shows every text as text (no HTML from a run's files). Every
list is paged with a bounded ``limit``; a text search decodes at most
:data:`~tinker_client.viewer.data.MAX_SCAN` episodes per request. The routes only read, and
bodies are refused past :data:`MAX_REQUEST_BYTES` (the server's header/body deadlines are those
of :mod:`tinker_core.http_limits`).

Routes (all GET): ``/api/runs`` (each with its ``lineage``: :func:`~tinker_client.viewer.lineage.run_lineage`,
which links a fork to its parent only when both are served); per run ``/lineage``, ``/metrics?since=N``, ``/rollouts/index``,
``/rollouts?kind&step&group&min_reward&max_reward&stop_reason&min_tokens&max_tokens&q&offset&limit``,
``/config``, ``/checkpoints``, ``/trace``, ``/report``.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import JSONResponse, Response

from tinker_client.viewer.data import MAX_SCAN, Rollout, RunDir, is_run_dir
from tinker_client.viewer.files import MAX_JSON_BYTES, inside
from tinker_client.viewer.hosts import HostCheck, host_allowlist
from tinker_client.viewer.lineage import run_lineage

__all__ = ["MAX_PAGE", "MAX_REQUEST_BYTES", "PAGE_HEADERS", "create_app", "host_allowlist", "load_runs"]

#: The most episodes one ``/rollouts`` page holds.
MAX_PAGE = 200
#: The largest request body accepted (the API only reads; this bounds what a client can send).
MAX_REQUEST_BYTES = 16 * 1024
#: The page's files, served from the package (no CDN, no build step).
STATIC = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
#: Sent with the page and its files: scripts only from this origin (no inline script, so text
#: from a run that reached the page as HTML could not run), not framed, no referrer.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
}


def load_runs(paths: list[Path]) -> list[RunDir]:
    """The run dirs to serve: each of ``paths``, and for a compare report dir (``report.json``)
    also each job's run dir that exists inside it (a job's run dir elsewhere, named by the report,
    is not served: the report dir's warnings name it; give it on the command line to view it).
    :class:`ValueError` names a path that is not a run dir."""
    runs: list[RunDir] = []
    seen: set[Path] = set()

    def add(path: Path, name: str | None = None) -> None:
        path = path.resolve()
        if path in seen:
            return
        seen.add(path)
        name = name or path.name
        if any(r.name == name for r in runs):
            name = f"{path.parent.name}/{path.name}"
        runs.append(RunDir(path, name))

    for given in paths:
        if not is_run_dir(given):
            why = "does not exist" if not given.exists() else "holds no metrics.jsonl, config.json, result.json or report.json"
            raise ValueError(f"{given} is not a run dir: it {why}")
        add(given)
        _add_report_jobs(next(r for r in runs if r.root == given.resolve()), add)
    return runs


def _add_report_jobs(report_dir: RunDir, add: Any) -> None:
    """The job run dirs of a compare report dir that lie inside it (see :func:`load_runs`)."""
    report = report_dir.read_json("report.json")
    if report is None:
        return
    root, elsewhere = report_dir.root, []
    jobs = report.get("jobs") if isinstance(report.get("jobs"), list) else []
    for job in (j for j in jobs if isinstance(j, dict)):
        where = Path(str(job.get("run_dir") or ""))
        if not str(where):
            continue
        name = f"{job.get('variant')}/seed-{job.get('seed')}"
        found = [c for c in (where, report_dir.path / where, report_dir.path.parent / where) if is_run_dir(c)]
        inner = [c for c in found if inside(root, c) and c.resolve() != root]
        if inner:
            add(inner[0], name)
        elif found:
            elsewhere.append(str(where))
    for job_dir in sorted(report_dir.path.glob("jobs/*/seed-*")):  # compare's own layout, wherever the report was moved
        if is_run_dir(job_dir) and inside(root, job_dir):
            add(job_dir, f"{job_dir.parent.name}/{job_dir.name}")
    if elsewhere:
        report_dir.problems["report.json"] = (f"names {len(elsewhere)} run dir(s) outside this report dir, not served: "
                                              f"{', '.join(elsewhere[:5])}; give them to opentinker view to see them")


def _keep(kind: str, step: int | None, group: int | None, min_reward: float | None, max_reward: float | None,
          stop_reason: str | None, min_tokens: int | None, max_tokens: int | None):
    def keep(r: Rollout) -> bool:
        return (r.kind == kind and (step is None or r.step == step) and (group is None or r.group == group)
                and (min_reward is None or (r.reward is not None and r.reward >= min_reward))
                and (max_reward is None or (r.reward is not None and r.reward <= max_reward))
                and (not stop_reason or r.stop_reason == stop_reason)
                and (min_tokens is None or r.new_tokens >= min_tokens)
                and (max_tokens is None or r.new_tokens <= max_tokens))
    return keep


def _matches(record: dict[str, Any], needle: str) -> bool:
    texts = [str(record.get("prompt") or "")]
    texts += [str(t.get("text") or "") for t in record.get("turns") or [] if isinstance(t, dict)]
    texts += [str(m.get("content") or "") for m in record.get("messages") or [] if isinstance(m, dict)]
    return any(needle in t.lower() for t in texts)


def create_app(runs: list[RunDir], *, index_at_start: bool = True, allowed_hosts: Collection[str] | None = None) -> FastAPI:
    """The viewer app serving ``runs`` (see the module docstring). With ``index_at_start`` a
    background thread reads every run's files at once, so the rollout browser opens without
    waiting while the page already shows the curves. ``allowed_hosts``: the ``Host`` names it
    answers (:func:`host_allowlist`); None checks none (the scheduler's route, whose API takes a
    tenant's key, and tests)."""
    app = FastAPI(title="OpenTinker run viewer", docs_url=None, redoc_url=None, openapi_url=None)
    if allowed_hosts is not None:
        app.add_middleware(HostCheck, allowed=allowed_hosts)
    app.state.runs = runs
    if index_at_start:  # the episodes and trace of a long run take seconds: index them before they are asked for
        threading.Thread(target=lambda: [r.refresh() for r in runs], name="opentinker-view-index", daemon=True).start()
    _page_routes(app)
    _api_routes(app, runs)
    return app


def _page_routes(app: FastAPI) -> None:
    static = files("tinker_client.viewer") / "static"

    @app.get("/", include_in_schema=False)
    def index() -> Response:
        return Response((static / "index.html").read_bytes(), media_type="text/html", headers=PAGE_HEADERS)

    @app.get("/static/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        if name not in STATIC:  # a fixed set of names: no path reaches anything else
            raise HTTPException(404, f"no static file {name!r}")
        return Response((static / name).read_bytes(), media_type=STATIC[name], headers={"Cache-Control": "no-cache", **PAGE_HEADERS})


def _api_routes(app: FastAPI, runs: list[RunDir]) -> None:
    def run(rid: int) -> RunDir:
        if not 0 <= rid < len(runs):
            raise HTTPException(404, f"no run {rid}: this viewer serves runs 0 to {len(runs) - 1}")
        return runs[rid]

    @app.get("/api/runs")
    def list_runs() -> list[dict[str, Any]]:
        links = run_lineage(runs)  # first: an unreadable lineage.json is in this answer's warnings
        return [{"id": i, **r.summary(), "lineage": link} for i, (r, link) in enumerate(zip(runs, links, strict=True))]

    @app.get("/api/runs/{rid}/lineage")
    def lineage(rid: int) -> dict[str, Any]:
        run(rid)
        return run_lineage(runs)[rid]

    @app.get("/api/runs/{rid}/metrics")
    def metrics(rid: int, since: Annotated[int, Query(ge=0)] = 0) -> dict[str, Any]:
        return run(rid).metric_columns(since)

    @app.get("/api/runs/{rid}/rollouts/index")
    def rollout_index(rid: int) -> dict[str, Any]:
        return run(rid).rollout_index()

    @app.get("/api/runs/{rid}/rollouts")
    def rollouts(
        rid: int,
        kind: Annotated[str, Query(max_length=16)] = "train",
        step: int | None = None,
        group: int | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        stop_reason: Annotated[str | None, Query(max_length=64)] = None,
        min_tokens: int | None = None,
        max_tokens: int | None = None,
        q: Annotated[str | None, Query(max_length=200)] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    ) -> dict[str, Any]:
        r = run(rid)
        chosen = r.select(_keep(kind, step, group, min_reward, max_reward, stop_reason, min_tokens, max_tokens), step)
        complete = True
        if q:
            needle, found = q.lower(), []
            complete = len(chosen) <= MAX_SCAN
            for rollout, record in r.records(chosen[:MAX_SCAN]):
                if _matches(record, needle):
                    found.append(rollout)
            chosen = found
        page = [{"index": ro.index, **record} for ro, record in r.records(chosen[offset:offset + limit])]
        return {"total": len(chosen), "offset": offset, "limit": limit, "search_complete": complete, "items": page}

    @app.get("/api/runs/{rid}/config")
    def config(rid: int) -> dict[str, Any]:
        r = run(rid)
        return {"config": r.read_json("config.json"), "result": r.read_json("result.json"),
                "overrides": r.read_json("overrides.json")}

    @app.get("/api/runs/{rid}/checkpoints")
    def checkpoints(rid: int) -> list[dict[str, Any]]:
        return run(rid).checkpoints()

    @app.get("/api/runs/{rid}/trace")
    def trace(rid: int) -> dict[str, Any]:
        return run(rid).trace_summary()

    @app.get("/api/runs/{rid}/report")
    def report(rid: int) -> dict[str, Any]:
        r = run(rid)
        return {"report": r.read_json("report.json"), "markdown": r.read_text("report.md", MAX_JSON_BYTES)}


def guarded(app: FastAPI) -> Any:
    """``app`` behind the body guard every OpenTinker server runs with (size and time limits)."""
    from tinker_core.http_limits import BodyGuard, HttpLimits

    def respond(status: int, message: str) -> Any:
        return JSONResponse({"detail": message}, status_code=status)

    return BodyGuard(app, HttpLimits(MAX_REQUEST_BYTES), respond, what="the viewer's request limit")
