"""The ``opentinker`` plugin of tinker-serve: it adds the ``opentinker serve`` command, the
``openai`` rollout proxy (:mod:`tinker_serve.proxy`) that ``agent/program-v0`` jobs train through,
and the ``openai`` HTTP front (:mod:`tinker_serve.directory`) the scheduler's ``--serve-port`` mounts."""

from __future__ import annotations

from typing import Any

from tinker_core.hookspecs import HttpFrontRegister, RolloutProxyRegister, hookimpl


@hookimpl
def opentinker_register_commands(cli: Any) -> None:
    """Add ``opentinker serve`` (:mod:`tinker_serve.cli`)."""
    from tinker_serve.cli import register

    register(cli)


def start_openai_proxy(*args: Any, **kwargs: Any) -> Any:
    """OpenAI-compatible rollout proxy recording token ids and logprobs per call (tinker_serve.proxy)."""
    from tinker_serve.proxy import start_rollout_proxy

    return start_rollout_proxy(*args, **kwargs)


@hookimpl
def opentinker_register_rollout_proxies(register: RolloutProxyRegister) -> None:
    """Register ``openai`` (:func:`tinker_serve.proxy.start_rollout_proxy`)."""
    register("openai", start_openai_proxy)


def openai_front(*args: Any, **kwargs: Any) -> Any:
    """OpenAI-compatible API over a model directory's models (tinker_serve.directory)."""
    from tinker_serve.directory import openai_front

    return openai_front(*args, **kwargs)


@hookimpl
def opentinker_register_http_fronts(register: HttpFrontRegister) -> None:
    """Register ``openai`` (:func:`tinker_serve.directory.openai_front`)."""
    register("openai", openai_front)
