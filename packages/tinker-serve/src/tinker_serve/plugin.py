"""The ``opentinker`` plugin of tinker-serve: it adds the ``opentinker serve`` command."""

from __future__ import annotations

from typing import Any

from tinker_core.hookspecs import hookimpl


@hookimpl
def opentinker_register_commands(cli: Any) -> None:
    """Add ``opentinker serve`` (:mod:`tinker_serve.cli`)."""
    from tinker_serve.cli import register

    register(cli)
