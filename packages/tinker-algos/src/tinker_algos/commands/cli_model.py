"""``opentinker model import`` and ``opentinker model fetch``: bring real pretrained models in.

* ``opentinker model import GGUF_FILE --output DIR``: a GGUF file becomes a Hugging Face
  directory (:func:`tinker_algos.hub.import_gguf`).
* ``opentinker model fetch NAME``: a registry preset (``smollm2-135m-instruct``) is downloaded
  and imported into the cache once (:func:`tinker_algos.hub.fetch_preset`); prints its path.
* ``opentinker model export-tokenizer MODEL DIR``: MODEL's tokenizer (``tiny``, a preset, a
  directory or a hub id) written to DIR, which ``AutoTokenizer.from_pretrained`` loads offline
  (what a remote Tinker client needs); prints DIR.

Added to the ``opentinker`` CLI by :mod:`tinker_algos.plugin`. Importing this module is cheap:
torch and transformers load only when a command runs. Exit codes: 0 success, 2 bad input (one
``error:`` line).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

EXIT_BAD_INPUT = 2
STAGE_LABELS = {
    "download": "downloading",
    "check": "reading GGUF header",
    "tokenizer": "loading tokenizer",
    "weights": "dequantising weights",
    "save": "writing safetensors",
}

app = typer.Typer(help="Import real pretrained models (GGUF files, registry presets).", no_args_is_help=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(reason: str) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {reason}", markup=True)
    raise typer.Exit(EXIT_BAD_INPUT)


class StageProgress:
    """A rich display with one bar per stage, driven by ``progress(stage, done, total)`` calls."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or err_console
        self.progress = Progress(
            TextColumn("{task.description:<22}"),
            BarColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> StageProgress:
        return self  # the display starts with the first stage: an early error shows alone

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self.tasks:
            if exc_type is not None:  # leave no bars behind: the error line is all that shows
                self.progress.live.transient = True
            self.progress.stop()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.tasks:
            self.progress.start()
        if stage not in self.tasks:
            for other in self.tasks.values():  # earlier stages are finished
                task = self.progress.tasks[other]
                self.progress.update(other, completed=task.total)
            self.tasks[stage] = self.progress.add_task(STAGE_LABELS.get(stage, stage), total=total or 1, detail="")
        detail = ""
        if stage == "download" and total:
            detail = f"{done / 1e6:.1f}/{total / 1e6:.1f} MB"
        elif stage == "weights" and total:
            detail = f"{done}/{total} tensors"
        self.progress.update(self.tasks[stage], completed=done, total=total or 1, detail=detail)


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


@app.command("import")
def import_command(
    gguf_file: Annotated[Path, typer.Argument(help="A GGUF file (e.g. model.Q4_K_M.gguf).", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="The Hugging Face directory to write.", show_default=False)],
    force: Annotated[bool, typer.Option("--force", help="Replace OUTPUT if it exists.")] = False,
) -> None:
    """Import a GGUF file as a Hugging Face model directory (safetensors, tokenizer, chat template)."""
    from tinker_algos.hub import ModelLoadError, import_gguf

    if output.exists() and not force:
        _fail(f"--output {output} already exists; choose another directory or pass --force")
    started = time.perf_counter()
    try:
        with StageProgress() as bars:
            path = import_gguf(gguf_file, output, progress=bars, overwrite=force)
    except ModelLoadError as e:
        _fail(str(e))  # the display is gone by now (transient on error)
    typer.echo(f"imported {gguf_file} -> {path} ({_size_mb(path):.0f} MB, {time.perf_counter() - started:.0f} s)")


@app.command("fetch")
def fetch_command(
    name: Annotated[str, typer.Argument(help="A registry preset, e.g. smollm2-135m-instruct.", show_default=False)],
) -> None:
    """Download and import a registry preset into the cache (once); print its directory."""
    from tinker_algos.hub import PRESETS, ModelLoadError, fetch_preset, is_fetched

    if name not in PRESETS:
        from tinker_core.errors import did_you_mean

        close = did_you_mean(name, PRESETS) or next((p for p in sorted(PRESETS) if p.startswith(name)), None)
        hint = f"did you mean {close!r}?" if close else f"presets: {', '.join(sorted(PRESETS))}"
        _fail(f"unknown model preset {name!r}; {hint}")
    if is_fetched(name):
        typer.echo(str(fetch_preset(name)))
        return
    try:
        with StageProgress() as bars:
            path = fetch_preset(name, progress=bars)
    except ModelLoadError as e:
        _fail(str(e))
    typer.echo(str(path))


@app.command("export-tokenizer")
def export_tokenizer_command(
    model: Annotated[str, typer.Argument(help="tiny, a registry preset, a model directory or a hub id.", show_default=False)],
    output: Annotated[Path, typer.Argument(help="The directory to write the tokenizer to.", show_default=False)],
    force: Annotated[bool, typer.Option("--force", help="Write into OUTPUT even if it holds files.")] = False,
) -> None:
    """Write MODEL's tokenizer (and chat template) to OUTPUT, a directory that
    ``AutoTokenizer.from_pretrained`` loads offline: what a Tinker client on another machine needs
    for ``get_tokenizer`` or a cookbook recipe's ``model_name``."""
    from tinker_algos.hub import ModelLoadError
    from tinker_algos.model.tokenizer import load_tokenizer

    if output.exists() and (not output.is_dir() or (any(output.iterdir()) and not force)):
        _fail(f"{output} exists and is not an empty directory; choose another or pass --force")
    try:
        tok = load_tokenizer(model)
    except (ModelLoadError, OSError, ValueError) as e:
        _fail(f"MODEL {model!r}: {e}")
    output.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(output)
    typer.echo(str(output.resolve()))


@app.command("list")
def list_command() -> None:
    """List the registry presets, and whether each is in the cache."""
    from tinker_algos.hub import PRESETS, is_fetched, preset_dir

    for name, preset in sorted(PRESETS.items()):
        where = str(preset_dir(name)) if is_fetched(name) else f"not fetched (opentinker model fetch {name})"
        typer.echo(f"{name}  {preset.requirement}  {preset.description}\n  {where}")


def register(cli: typer.Typer) -> None:
    """Add the ``model`` command group to the ``opentinker`` app ``cli``."""
    cli.add_typer(app, name="model")
