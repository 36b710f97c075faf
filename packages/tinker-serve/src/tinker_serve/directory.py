"""The ``openai`` HTTP front over a :class:`~tinker_core.http_fronts.ModelDirectory`: the
scheduler's ``--serve-port`` route (registered in :mod:`tinker_serve.plugin`).

:class:`DirectoryBackend` is a :class:`~tinker_serve.backend.Backend` whose callers, model lists
and model names come from the directory (the scheduler's tenants and their finished jobs), and
whose engines are loaded here: one per base model, on first use, with the adapters the directory
names loaded onto it on first use too. At most :data:`MAX_ADAPTERS` adapters per base stay
loaded; the least recently used is dropped when one more is needed. Callers name models; they
do not load adapters by path (``hot_loading`` is off).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from tinker_core.http_fronts import APIError, ModelDirectory
from tinker_core.http_limits import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, HttpLimits
from tinker_serve.engine import Engine
from tinker_serve.served import ServedModels

logger = logging.getLogger(__name__)

#: Adapters kept loaded per base model; the least recently used one goes when another is needed.
MAX_ADAPTERS = 64


class DirectoryBackend:
    """The models ``directory`` names, served on engines loaded here (see the module docstring).
    ``device`` and ``max_batch`` go to every engine."""

    hot_loading = False  # callers name models; loading arbitrary paths of the server's disk is not theirs

    def __init__(self, directory: ModelDirectory, *, device: str | None = None, max_batch: int = 32) -> None:
        self.directory, self.device, self.max_batch = directory, device, max_batch
        self._bases: dict[str, ServedModels] = {}
        self._used: dict[tuple[str, str], float] = {}  # (base, model name) -> last use
        self._lock = threading.RLock()  # loads one model at a time
        self._started = False

    def caller(self, headers: Mapping[str, str]) -> Any:
        return self.directory.caller(headers)

    def list_models(self, caller: Any) -> list[dict[str, Any]]:
        return self.directory.list_models(caller)

    def lookup(self, caller: Any, name: str) -> ServedModels:
        ref = self.directory.resolve(caller, name)
        with self._lock:
            served = self._base(ref.base, ref.chat_template)
            if ref.adapter is not None:
                if name not in served.models:
                    self._make_room(ref.base, served)
                    served.load_adapter(name, ref.adapter)
                self._used[(ref.base, name)] = time.monotonic()
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

    def _base(self, base: str, chat_template: str) -> ServedModels:
        with self._lock:
            served = self._bases.get(base)
            if served is None:
                from tinker_algos.model.device import DeviceError
                from tinker_algos.model.models import ModelLoadError
                from tinker_core.errors import ConfigError

                logger.info("openai front: loading base model %s", base)
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


def openai_front(models: ModelDirectory, *, header_timeout_s: float = HEADER_TIMEOUT_S,
                 body_timeout_s: float = BODY_TIMEOUT_S, device: str | None = None, max_batch: int = 32) -> Any:
    """The ``openai`` HTTP front: :func:`tinker_serve.app.create_app` over a :class:`DirectoryBackend`
    of ``models`` (its lifespan starts and stops the engines), bodies bounded by
    :data:`~tinker_serve.protocol.MAX_REQUEST_BYTES` and the two deadlines."""
    from tinker_serve.app import create_app
    from tinker_serve.protocol import MAX_REQUEST_BYTES

    limits = HttpLimits(MAX_REQUEST_BYTES, header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s)
    return create_app(DirectoryBackend(models, device=device, max_batch=max_batch), limits=limits)
