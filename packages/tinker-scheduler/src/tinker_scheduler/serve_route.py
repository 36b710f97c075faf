"""OpenAI-compatible serving of finished LoRA jobs from the scheduler (``scheduler start --serve-port``).

The app is :mod:`tinker_serve`'s (``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``,
streaming, the chat page at ``/``) over :class:`SchedulerModels`, a
:class:`tinker_serve.backend.Backend`:

- keys are the scheduler's tenant keys (``otk_...``, also accepted with the Tinker SDK's ``tml-``
  prefix), checked as every other scheduler call is (:func:`tinker_scheduler.auth.authenticate`);
- a caller sees its own tenant's succeeded LoRA jobs, by job id (``job-3f9c2a1b7d04``, as the
  job listing shows them), and the base models of those jobs; another tenant's job is 404
  ``model_not_found``, a job that has not succeeded 409, a full fine-tuning job 400;
- with the Tinker gateway on (``--tinker-port``), a ``tinker://<model_id>/sampler_weights/<name>``
  path of the caller's own Tinker model is a model name too (resolved by the gateway's
  :meth:`~tinker_scheduler.tinker_api.translate.Models.resolve`, so another tenant's is 404).

A job's adapter is its run directory's newest intact checkpoint, loaded on first use onto one
engine per base model (also loaded on first use); at most :data:`MAX_ADAPTERS` adapters per base
stay loaded, the least recently used is dropped when one more is needed.

The engines run in this (the scheduler's) process, not on the model hosts that train: peft's
active adapter is state of the whole model, so decoding beside a training step on the same host
would race with it (the model hosts run one call at a time for that reason). The price: each base
model is loaded once more, in this process, on its default device (CUDA when there is one, outside
Ray's resource accounting).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_scheduler.auth import AuthError, AuthMode, authenticate
from tinker_scheduler.errors import StatusError
from tinker_scheduler.http_thread import HttpServer
from tinker_scheduler.job_records import JobRecord, JobState
from tinker_scheduler.store import JobStore
from tinker_scheduler.tinker_api.auth import KEY_PREFIX as TINKER_KEY_PREFIX
from tinker_scheduler.tinker_api.auth import api_key_of
from tinker_serve.engine import Engine
from tinker_serve.protocol import APIError
from tinker_serve.served import ServedModels

logger = logging.getLogger(__name__)

#: Adapters kept loaded per base model; the least recently used one goes when another is needed.
MAX_ADAPTERS = 64
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
    """The serve route's :class:`tinker_serve.backend.Backend` (see the module docstring).

    ``tinker`` is the Tinker gateway's ``Models`` (None: ``tinker://`` names are 404); ``device``
    and ``max_batch`` go to every engine."""

    hot_loading = False  # callers name jobs; loading arbitrary paths of the scheduler's disk is not theirs

    def __init__(self, store: JobStore, auth: AuthMode, *, tinker: Any = None, device: str | None = None,
                 max_batch: int = 32) -> None:
        self.store, self.auth, self.tinker = store, auth, tinker
        self.device, self.max_batch = device, max_batch
        self._bases: dict[str, ServedModels] = {}
        self._used: dict[tuple[str, str], float] = {}  # (base, model name) -> last use
        self._lock = threading.RLock()  # loads one model at a time
        self._started = False

    # ---- Backend --------------------------------------------------------------------------------
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

    def lookup(self, tenant: str, name: str) -> ServedModels:
        if name.startswith(TINKER_PREFIX):
            base, adapter, chat_template = self._tinker_weights(tenant, name)
        else:
            job = self.store.get(name, tenant)
            if job is None:
                base_job = next((j for j in self._jobs(tenant) if j.base == name), None)
                if base_job is None:
                    raise not_found(name)
                return self._base(name, base_job.chat_template)
            model = self._check_job(job)
            base, adapter, chat_template = model.base, model.source, model.chat_template
        with self._lock:
            served = self._base(base, chat_template)
            if name not in served.models:
                self._make_room(base, served)
                served.load_adapter(name, adapter)
            self._used[(base, name)] = time.monotonic()
        return served

    def load_adapter(self, caller: Any, name: str, path: str) -> None:
        raise APIError(404, "adapters are not loaded by path here: finished LoRA jobs are served by their job id")

    unload_adapter = load_adapter

    def engines(self) -> list[Engine]:
        return [s.engine for s in list(self._bases.values())]

    def start(self) -> None:
        with self._lock:
            self._started = True
            for e in self.engines():
                e.start()

    def stop(self) -> None:
        with self._lock:
            self._started = False
            for e in self.engines():
                e.stop()

    # ---- jobs, bases, adapters ----------------------------------------------------------------
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

    def _base(self, base: str, chat_template: str) -> ServedModels:
        with self._lock:
            served = self._bases.get(base)
            if served is None:
                from tinker_algos.model.device import DeviceError
                from tinker_algos.model.models import ModelLoadError
                from tinker_core.errors import ConfigError

                logger.info("serve route: loading base model %s", base)
                try:
                    served = ServedModels.load(base, name=base, device=self.device, chat_template=chat_template,
                                               max_batch=self.max_batch)
                except (ModelLoadError, DeviceError, ConfigError) as e:
                    raise APIError(503, f"cannot load the base model {base!r}: {e}", type="server_error",
                                   code="model_load_failed") from None
                self._bases[base] = served
                if self._started:
                    served.engine.start()
            return served

    def _make_room(self, base: str, served: ServedModels) -> None:
        loaded = sorted((t, name) for (b, name), t in self._used.items() if b == base)
        for _, name in loaded[: max(0, len(loaded) - MAX_ADAPTERS + 1)]:
            del self._used[(base, name)]
            served.unload_adapter(name)


def serve(scheduler: Any, host: str = "127.0.0.1", port: int = 0, *, tinker: Any = None,
          device: str | None = None) -> HttpServer:
    """Serve the OpenAI-compatible route of a started ``scheduler`` on ``host:port`` (0: a free
    port). ``tinker``: the Tinker gateway's ``Models``, for ``tinker://`` model names."""
    from tinker_core.http_limits import HttpLimits
    from tinker_serve.app import MAX_REQUEST_BYTES, create_app

    config = scheduler.config
    models = SchedulerModels(scheduler.store, config.auth, tinker=tinker, device=device)
    limits = HttpLimits(MAX_REQUEST_BYTES, header_timeout_s=config.http_header_timeout_s,
                        body_timeout_s=config.http_body_timeout_s)
    from tinker_scheduler.viewer_route import ViewerFront

    # lifespan on: the app's lifespan starts and stops the engines; /viewer/jobs/<id>/: the run viewer
    app = ViewerFront(scheduler.store, config.auth, fallback=create_app(models, limits=limits))
    return HttpServer(app, host, port, name="opentinker-serve-route", lifespan="on",
                      join_timeout_s=30.0, header_timeout_s=limits.header_timeout_s)

