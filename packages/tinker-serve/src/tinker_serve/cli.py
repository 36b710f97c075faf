"""``opentinker serve MODEL``: serve a base model and its adapters over OpenAI's HTTP API.

Added to the ``opentinker`` CLI by :mod:`tinker_serve.plugin`. Importing this module is cheap:
torch, transformers and the web stack load only when the command runs. Exit codes: 0 after a
clean shutdown, 2 on bad input (one ``error:`` line): a model or adapter that cannot be loaded,
a malformed ``--adapter``, a device this machine lacks.
"""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

EXIT_BAD_INPUT = 2
API_KEY_ENV = "OPENTINKER_SERVE_API_KEY"
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(reason: str) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {reason}", markup=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def parse_adapter(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` -> ``(name, path)``; a bare PATH is named after its last directory."""
    name, sep, path = spec.partition("=")
    if not sep:
        from pathlib import Path

        path, name = spec, Path(spec.rstrip("/")).name
    if not name or not path:
        raise ValueError(f"--adapter {spec!r}: use NAME=PATH (a run directory, checkpoint or PEFT adapter)")
    return name, path


def serve_command(
    model: Annotated[str, typer.Argument(help="Base model: 'tiny', a preset (smollm2-135m-instruct), a model directory or a hub id.", show_default=False)],
    adapter: Annotated[list[str] | None, typer.Option("--adapter", help="NAME=PATH: serve a LoRA adapter (run dir, checkpoint or PEFT dir) as model NAME; repeatable.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar=API_KEY_ENV, help=f"Require 'Authorization: Bearer KEY' on /v1 routes (env {API_KEY_ENV}).")] = None,
    name: Annotated[str | None, typer.Option("--served-model-name", help="The base model's name in the API (default: MODEL).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:N (default: CUDA when available).")] = None,
    precision: Annotated[str | None, typer.Option("--precision", help="fp32, bf16-mixed, bf16, fp16-mixed (default: auto).")] = None,
    chat_template: Annotated[str, typer.Option("--chat-template", help="auto, tokenizer, none, or a Jinja file.")] = "auto",
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="Rows (samples) decoded together; more requests wait.")] = 32,
    max_request_bytes: Annotated[int, typer.Option("--max-request-bytes", min=1, help="The largest request body accepted (larger: HTTP 413).")] = 8 * 1024 * 1024,
    header_timeout: Annotated[float, typer.Option("--header-timeout", min=0.001, help="Seconds a client has to send a request's headers before its connection is closed.")] = 10.0,
    body_timeout: Annotated[float, typer.Option("--body-timeout", min=0.001, help="Seconds a client has to send a request's body (slower: HTTP 408).")] = 60.0,
) -> None:
    """Serve MODEL and its LoRA adapters with OpenAI's API (completions, chat, streaming) and a chat page at /."""
    try:
        adapters = [parse_adapter(a) for a in adapter or []]
    except ValueError as e:
        _fail(str(e))
    from tinker_core.progress import is_quiet, status

    loading = f"loading model {model}" + "".join(f", adapter {n} from {p}" for n, p in adapters)
    with status(err_console, loading):
        served = _load(model, adapters, name=name, device=device, precision=precision, chat_template=chat_template, max_batch=max_batch)
    import uvicorn

    from tinker_core.http_limits import HttpLimits, protocol_class
    from tinker_serve.app import create_app

    spec = served.policy.spec
    err_console.print(
        f"serving {', '.join(served.models)} on http://{host}:{port} ({spec.device}, {spec.precision}); "
        f"chat page at http://{host}:{port}/", markup=False,
    )
    limits = HttpLimits(max_request_bytes, header_timeout_s=header_timeout, body_timeout_s=body_timeout)
    app = create_app(served, api_key=api_key, limits=limits)
    uvicorn.run(app, host=host, port=port, log_level="warning" if is_quiet() else "info", http=protocol_class(limits.header_timeout_s))


def _load(model: str, adapters: list[tuple[str, str]], **options: Any) -> Any:
    """The :class:`~tinker_serve.served.ServedModels` of ``model`` with ``adapters``; bad input exits 2."""
    from tinker_algos.model.device import DeviceError
    from tinker_algos.model.models import ModelLoadError
    from tinker_algos.run.progress import quiet_third_party_progress
    from tinker_core.errors import ConfigError
    from tinker_serve.protocol import APIError
    from tinker_serve.served import ServedModels

    quiet_third_party_progress()  # the startup lines are the output, not Hugging Face's loading bars
    try:
        served = ServedModels.load(model, **options)
        for adapter_name, path in adapters:
            served.load_adapter(adapter_name, path)
    except (ModelLoadError, DeviceError, ConfigError) as e:
        _fail(str(e))
    except APIError as e:
        _fail(e.message)
    return served


def register(cli: typer.Typer) -> None:
    """Add ``serve`` to the ``opentinker`` app ``cli``."""
    cli.command("serve")(serve_command)
