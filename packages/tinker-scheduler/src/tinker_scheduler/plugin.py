"""The ``scheduler`` entry point in the ``opentinker`` group: adds ``opentinker scheduler ...``.

Light on purpose: the commands import Ray and gRPC only when they run.
"""

from __future__ import annotations

from typing import Any

from tinker_core.hookspecs import hookimpl


@hookimpl
def opentinker_register_commands(cli: Any) -> None:
    """Add the ``scheduler`` command group (``start``, ``add-tenant``) to the CLI."""
    from tinker_scheduler.cli import app

    cli.add_typer(app, name="scheduler")
