"""OpenAI-compatible serving of finished LoRA jobs from the scheduler (``scheduler start --serve-port``).

The app is tinker-serve's ``openai`` HTTP front (``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``, streaming, the chat page at ``/``), found in the plugin registry at
run time (:mod:`tinker_core.http_fronts`: the scheduler imports no tinker-serve), over
:class:`SchedulerModels`, a :class:`~tinker_core.http_fronts.ModelDirectory`:

- keys are the scheduler's tenant keys (``otk_...``, also accepted with the Tinker SDK's ``tml-``
  prefix), checked as every other scheduler call is (:func:`tinker_scheduler.auth.authenticate`);
- a caller sees its own tenant's succeeded LoRA jobs, by job id (``job-3f9c2a1b7d04``, as the
  job listing shows them), and the base models of those jobs; another tenant's job is 404
  ``model_not_found``, a job that has not succeeded 409, a full fine-tuning job 400;
- with the Tinker gateway on (``--tinker-port``), a ``tinker://<model_id>/sampler_weights/<name>``
  path of the caller's own Tinker model is a model name too (resolved by the gateway's
  :meth:`~tinker_scheduler.tinker_api.translate.Models.resolve`, so another tenant's is 404).

A job's adapter is its run directory's newest intact checkpoint; the front loads it on first use
onto one engine per base model (also loaded on first use) and keeps the most recently used ones.

The engines run in this (the scheduler's) process, not on the model hosts that train: peft's
active adapter is state of the whole model, so decoding beside a training step on the same host
would race with it (the model hosts run one call at a time for that reason). The price: each base
model is loaded once more, in this process, on its default device (CUDA when there is one, outside
Ray's resource accounting).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_core.http_fronts import OPENAI, APIError, ModelRef
from tinker_scheduler.auth import AuthError, AuthMode, authenticate
from tinker_scheduler.errors import StatusError
from tinker_scheduler.http_thread import HttpServer
from tinker_scheduler.job_records import JobRecord, JobState
from tinker_scheduler.store import JobStore
from tinker_scheduler.tinker_api.auth import KEY_PREFIX as TINKER_KEY_PREFIX
from tinker_scheduler.tinker_api.auth import api_key_of

#: Succeeded jobs ``GET /v1/models`` lists per tenant (newest first).
MAX_LISTED_JOBS = 500
TINKER_PREFIX = "tinker://"


@dataclass(frozen=True)
class JobModel:
    """A job as a model: its base model and chat template, and where its adapter comes from."""

    name: str
    base: str
    chat_template: str
    source: str
    created: int


def not_found(name: str) -> APIError:
    return APIError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")


def job_model(job: JobRecord) -> JobModel | None:
    """The model of a LoRA job (None for a full fine-tuning job); reads the stored config."""
    config = json.loads(job.config_json or "{}")
    if not config.get("lora"):
        return None
    model = config.get("model") or {}
    return JobModel(job.id, str(model.get("name") or "tiny"), str(model.get("chat_template") or "auto"),
                    job.run_dir, int(job.finished_at or job.created_at))


class SchedulerModels:
    """The serve route's :class:`~tinker_core.http_fronts.ModelDirectory` (see the module docstring).

    ``tinker`` is the Tinker gateway's ``Models`` (None: ``tinker://`` names are 404)."""

    def __init__(self, store: JobStore, auth: AuthMode, *, tinker: Any = None) -> None:
        self.store, self.auth, self.tinker = store, auth, tinker

    def caller(self, headers: Mapping[str, str]) -> str:
        """The tenant of ``Authorization: Bearer KEY`` (or ``X-API-Key: KEY``); KEY may carry ``tml-``."""
        key = api_key_of(headers).removeprefix(TINKER_KEY_PREFIX)
        try:
            return authenticate(self.store, self.auth, [("x-api-key", key)] if key else [])
        except AuthError as e:
            raise APIError(401, str(e).replace("the metadata ", "the header ", 1), code="invalid_api_key") from None

    def list_models(self, tenant: str) -> list[dict[str, Any]]:
        jobs = self._jobs(tenant)
        bases = {j.base: j.created for j in reversed(jobs)}
        cards = [{"id": b, "object": "model", "created": t, "owned_by": "opentinker", "root": b, "parent": None}
                 for b, t in bases.items()]
        return cards + [{"id": j.name, "object": "model", "created": j.created, "owned_by": tenant, "root": j.source,
                         "parent": j.base} for j in jobs]

    def resolve(self, tenant: str, name: str) -> ModelRef:
        if name.startswith(TINKER_PREFIX):
            base, adapter, chat_template = self._tinker_weights(tenant, name)
            return ModelRef(name, base, chat_template, adapter)
        job = self.store.get(name, tenant)
        if job is None:
            base_job = next((j for j in self._jobs(tenant) if j.base == name), None)
            if base_job is None:
                raise not_found(name)
            return ModelRef(name, name, base_job.chat_template)
        model = self._check_job(job)
        return ModelRef(name, model.base, model.chat_template, model.source)

    # ---- jobs -------------------------------------------------------------------------------------
    def _jobs(self, tenant: str) -> list[JobModel]:
        jobs = self.store.list_jobs(tenant, [JobState.SUCCEEDED], limit=MAX_LISTED_JOBS, with_config=True)
        return [m for m in map(job_model, jobs) if m is not None]

    @staticmethod
    def _check_job(job: JobRecord) -> JobModel:
        if job.state != JobState.SUCCEEDED:
            raise APIError(409, f"job {job.id} is {job.state.name}{f' ({job.reason})' if job.reason else ''}; only "
                                "succeeded jobs are served (watch it: opentinker jobs watch " + job.id + ")",
                           param="model", code="model_not_ready")
        model = job_model(job)
        if model is None:
            raise APIError(400, f"job {job.id} trained full model weights, not a LoRA adapter; the scheduler serves LoRA "
                                f"jobs only (serve it on its own: opentinker serve {job.run_dir})", param="model",
                           code="model_not_lora")
        return model

    def _tinker_weights(self, tenant: str, path: str) -> tuple[str, str, str]:
        """(base model, adapter directory, chat template) of the caller's own sampler weights."""
        if self.tinker is None:
            raise APIError(404, f"The model `{path}` does not exist: tinker:// names need the Tinker gateway "
                                "(opentinker scheduler start --tinker-port PORT)", param="model", code="model_not_found")
        try:
            weights = self.tinker.resolve(tenant, path, "sampler_weights")
            base = self.tinker.weights_info(tenant, path).get("base_model")
        except StatusError as e:
            if e.code == "NOT_FOUND":
                raise not_found(path) from None
            raise APIError(400, str(e), param="model") from None
        adapter = Path(weights) / "adapter"
        if not base or not (adapter / "adapter_config.json").is_file():
            raise APIError(400, f"{path} holds no LoRA adapter (save it with save_weights_for_sampler of a LoRA "
                                "training client)", param="model", code="model_not_lora")
        return str(base), str(adapter), "auto"


class FrontMissing(Exception):
    """No plugin registers the ``openai`` HTTP front (tinker-serve is not installed)."""


def serve(scheduler: Any, host: str = "127.0.0.1", port: int = 0, *, tinker: Any = None,
          device: str | None = None) -> HttpServer:
    """Serve the OpenAI-compatible route of a started ``scheduler`` on ``host:port`` (0: a free
    port), with the run viewer under ``/viewer/jobs/``. ``tinker``: the Tinker gateway's ``Models``,
    for ``tinker://`` model names. :class:`FrontMissing` when tinker-serve is not installed."""
    from tinker_core.registry import get_registry
    from tinker_scheduler.viewer_route import ViewerFront

    fronts = get_registry("http_fronts")
    if OPENAI not in fronts:
        raise FrontMissing(f"no plugin registers the {OPENAI!r} HTTP front: tinker-serve is not installed")
    config = scheduler.config
    models = SchedulerModels(scheduler.store, config.auth, tinker=tinker)
    openai_app = fronts.get(OPENAI).obj(models, header_timeout_s=config.http_header_timeout_s,
                                        body_timeout_s=config.http_body_timeout_s, device=device)
    # lifespan on: the app's lifespan starts and stops the engines; /viewer/jobs/<id>/: the run viewer
    app = ViewerFront(scheduler.store, config.auth, fallback=openai_app)
    return HttpServer(app, host, port, name="opentinker-serve-route", lifespan="on",
                      join_timeout_s=30.0, header_timeout_s=config.http_header_timeout_s)
