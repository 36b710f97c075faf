"""The HTTP fronts a scheduler mounts without importing the packages that provide them.

The scheduler's ``--serve-port`` route serves tinker-serve's OpenAI API over the tenants'
finished jobs and tinker-client's run viewer per job; the layering (core <- algos <- serve,
scheduler; core <- client) forbids the scheduler to import either, so each registers its app
factory through :func:`tinker_core.hookspecs.opentinker_register_http_fronts` and the scheduler
finds it by name at run time (:func:`tinker_core.registry.get_http_front`). The names and their
factories' contracts:

- ``openai`` (tinker-serve): ``factory(models: ModelDirectory, *, header_timeout_s=...,
  body_timeout_s=..., device: str | None = None, max_batch: int = 32)`` returns the ASGI app of
  the OpenAI API (``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``, the chat page)
  with the deadlines of :mod:`tinker_core.http_limits`; its lifespan starts and stops the engines. ``models`` says who calls and which models each caller sees
  (:class:`ModelDirectory`); the front loads one engine per base model and the adapters on it.
- ``viewer`` (tinker-client): ``factory(runs: Sequence[tuple[Path, str]])`` returns the ASGI app
  of ``opentinker view`` over those ``(run directory, name)`` pairs; with none, the page and its
  static files only. It may raise :class:`ImportError` when its optional dependencies are missing.

:class:`APIError` is the one error both sides speak: a directory raises it (401 for a refused
key, 404 ``model_not_found``...), the front answers it in OpenAI's shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

OPENAI = "openai"
VIEWER = "viewer"


class APIError(Exception):
    """An error answered as OpenAI does: ``status`` and ``{"error": {...}}``."""

    def __init__(
        self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ModelRef:
    """What runs a model name: the ``base`` model (a preset, a hub id or a directory), its chat
    template, and the LoRA ``adapter`` (a run directory or a checkpoint) on it. ``adapter`` None
    is the base model itself, whose name is ``base``."""

    def __post_init__(self) -> None:
        if self.adapter is None and self.name != self.base:
            raise ValueError(f"ModelRef {self.name!r}: without an adapter the model is its base, so name must be "
                             f"the base ({self.base!r}); pass adapter= to serve an adapter under another name")

    name: str
    base: str
    chat_template: str = "auto"
    adapter: str | None = None


class ModelDirectory(Protocol):
    """Who may call the ``openai`` front and which models they see. Methods may block (a
    database read): the front calls them off its event loop. Each raises :class:`APIError`."""

    def caller(self, headers: Mapping[str, str]) -> Any:
        """Who sends a request with these (lower-case) headers; a 401 :class:`APIError` when nobody may."""
        ...

    def list_models(self, caller: Any) -> list[dict[str, Any]]:
        """The ``GET /v1/models`` entries (OpenAI's model objects) ``caller`` sees."""
        ...

    def resolve(self, caller: Any, name: str) -> ModelRef:
        """What runs model ``name`` for ``caller``; a 404 ``model_not_found`` :class:`APIError` for
        a model ``caller`` may not see (the same answer as for one that does not exist)."""
        ...
