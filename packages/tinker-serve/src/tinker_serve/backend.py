"""Where the HTTP app finds its models: who is calling, which models they see, which
:class:`~tinker_serve.served.ServedModels` (base model and engine) runs a model name.

:func:`tinker_serve.app.create_app` serves any :class:`Backend`. ``opentinker serve`` uses
:class:`LocalBackend`: one base model, its adapters, one optional API key. The scheduler's serve
route (``tinker_scheduler.serve_route``) is another backend: tenants' keys, one base model per
engine, loaded on first use, and the caller's own finished jobs as model names.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from tinker_serve.engine import Engine
from tinker_serve.protocol import APIError
from tinker_serve.served import ServedModel, ServedModels


class Backend(Protocol):
    """What the app asks. Methods may block (loading a model): the app calls them off its event loop."""

    #: Whether ``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` exist.
    hot_loading: bool

    def caller(self, headers: Mapping[str, str]) -> Any:
        """Who sends a request with these headers; an :class:`APIError` (401) when nobody may."""
        ...

    def list_models(self, caller: Any) -> list[dict[str, Any]]:
        """The ``GET /v1/models`` entries ``caller`` sees."""
        ...

    def lookup(self, caller: Any, name: str) -> ServedModels:
        """The served base that runs model ``name`` for ``caller`` (loading it first if needed);
        an :class:`APIError` (404 ``model_not_found`` for a model ``caller`` may not see)."""
        ...

    def load_adapter(self, caller: Any, name: str, path: str) -> None: ...

    def unload_adapter(self, caller: Any, name: str) -> None: ...

    def engines(self) -> list[Engine]:
        """The running engines (``GET /health`` counts their rows)."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


def model_card(served: ServedModels, model: ServedModel) -> dict[str, Any]:
    """A model's ``GET /v1/models`` entry."""
    return {"id": model.name, "object": "model", "created": model.created, "owned_by": "opentinker",
            "root": model.source, "parent": None if model.adapter is None else served.base_name}


def check_bearer(headers: Mapping[str, str], api_key: str) -> None:
    """Require ``Authorization: Bearer <api_key>`` (a 401 :class:`APIError` otherwise)."""
    given = headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if not given:
        raise APIError(401, "You didn't provide an API key: send 'Authorization: Bearer KEY'.", code="invalid_api_key")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")


class LocalBackend:
    """``opentinker serve``: one :class:`ServedModels`; with ``api_key``, every caller must send it."""

    hot_loading = True

    def __init__(self, served: ServedModels, api_key: str | None = None) -> None:
        self.served = served
        self.api_key = api_key

    def caller(self, headers: Mapping[str, str]) -> None:
        if self.api_key:
            check_bearer(headers, self.api_key)

    def list_models(self, caller: Any) -> list[dict[str, Any]]:
        return [model_card(self.served, m) for m in self.served.models.values()]

    def lookup(self, caller: Any, name: str) -> ServedModels:
        self.served.get(name)
        return self.served

    def load_adapter(self, caller: Any, name: str, path: str | Path) -> None:
        self.served.load_adapter(name, path)

    def unload_adapter(self, caller: Any, name: str) -> None:
        self.served.unload_adapter(name)

    def engines(self) -> list[Engine]:
        return [self.served.engine]

    def start(self) -> None:
        self.served.engine.start()

    def stop(self) -> None:
        self.served.engine.stop()
