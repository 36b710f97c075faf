"""``opentinker eval`` and ``opentinker export``: a trained policy, evaluated or written for other tools.

Added to the ``opentinker`` CLI by :mod:`tinker_algos.plugin`. Importing this module is cheap:
torch loads only when a command runs. The logic lives in :mod:`tinker_algos.commands.evaluation` and
:mod:`tinker_algos.commands.export`. Exit codes: 0 success, 1 failure at run time, 2 bad input (one
``error:`` line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tinker_algos.commands.cli import OverridesArg, _fail, err_console

SOURCE_HELP = "A run directory (its newest intact checkpoint), a checkpoint directory, or a saved adapter."


def eval_command(
    source: Annotated[Path, typer.Argument(help=SOURCE_HELP + " A model directory works too, with --env; a job config (.yaml) evaluates its untrained model, the baseline.")],
    overrides: OverridesArg = None,
    env: Annotated[str | None, typer.Option("--env", help="Env id (default: the run's env, with its eval_kwargs).")] = None,
    split: Annotated[str | None, typer.Option("--split", help="Set the env's 'split' argument (e.g. test).")] = None,
    n: Annotated[int | None, typer.Option("--n", help="Problems to play (default: the run's algorithm.eval_size, else 64); at most 100000, and at most the problems of the env's split when it has a finite one.")] = None,
    samples: Annotated[int, typer.Option("--samples", help="Samples a problem: 1 is greedy; k > 1 samples and reports pass@k (at most 1024).")] = 1,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", help="Tokens a turn (default: the run's rollout.max_new_tokens).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="First env seed (default: the one training's evaluation uses).")] = None,
    opponent: Annotated[str | None, typer.Option("--opponent", help="A multi-agent game's scripted opponent, one the env offers (default: the run's multi_agent.eval_opponents' first, else its eval_opponent, else its opponent, else random).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="JSON file to write (default: <run>/eval/step-N-<env>.json, else ./eval-<env>.json).")] = None,
    transcripts: Annotated[Path | None, typer.Option("--transcripts", help="Rollout records of every episode (default: the JSON file's name with .rollouts.jsonl; the format of a run's rollouts.jsonl).")] = None,
    base_model: Annotated[str | None, typer.Option("--base-model", help="Base model of an adapter saved outside a run.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:N (default: the run's model.device).")] = None,
) -> None:
    """Evaluate a checkpoint or adapter on an env's held-out problems: a table, and JSON.

    A multi-agent game is played greedily against a scripted opponent, the policy's seat alternating
    (each role's own adapter for a learners run), as training's held-out evaluation plays it.
    KEY.PATH=VALUE arguments override the settings of a job config SOURCE (e.g. env.eval_kwargs.digits=3).
    """
    from tinker_algos.commands.evaluation import (
        EvalError,
        default_output,
        eval_settings,
        evaluate_source,
        find_source,
    )
    from tinker_algos.model.device import DeviceError
    from tinker_algos.model.models import ModelLoadError
    from tinker_algos.records import recording
    from tinker_algos.run.progress import quiet_third_party_progress
    from tinker_core.config import OverrideError
    from tinker_core.errors import ConfigError
    from tinker_core.progress import status

    quiet_third_party_progress()  # our table is the output, not Hugging Face's loading bars
    try:
        src = find_source(source, overrides=overrides or ())
        settings = eval_settings(src.job, env_id=env, split=split, n=n, samples=samples, max_new_tokens=max_new_tokens, seed=seed,
                                 opponent=opponent)
        target = output or default_output(src, settings.env.id)
        records = transcripts or target.with_name(target.name.removesuffix(".json") + ".rollouts.jsonl")
        records.parent.mkdir(parents=True, exist_ok=True)
        games = settings.n * settings.samples
        doing = f"loading {src.checkpoint or src.path} and playing {games} episode{'s' * (games != 1)} of {settings.env.id}"
        with recording.transcripts(records, stage=settings.env.id, step=src.step or 0):
            report = evaluate_source(src, settings, base_model=base_model, device=device, progress=lambda: status(err_console, doing))
    except (EvalError, ModelLoadError, DeviceError, ConfigError, OverrideError) as e:
        _fail(str(e))
    for line in src.skipped:
        err_console.print(f"skipped damaged checkpoint {line}", markup=False, highlight=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report.to_dict(), indent=1) + "\n", encoding="utf-8")
    Console(highlight=False).print(eval_table(report.to_dict()))
    typer.echo(f"wrote {target} and the transcripts {records}")


def eval_table(report: dict) -> Table:
    """The table ``opentinker eval`` prints: one row, the headline metrics of ``report`` (a
    multi-agent game's: the outcome rates against its opponent)."""
    m = report["metrics"]
    where = report["source"] + (f" (step {report['step']})" if report.get("step") is not None else "")
    kwargs = ", ".join(f"{k}={v}" for k, v in sorted(report["env_kwargs"].items()))
    title = f"{where}\n{report['env']}" + (f" [{kwargs}]" if kwargs else "")
    if report.get("opponent"):
        title += f"\nagainst {report['opponent']}"
    table = Table(title=escape(title), title_justify="left")
    if report.get("opponent"):
        columns = ["n", "win", "draw", "loss", "reward mean", "turns", "error rate"]
        keys = ["eval/win_rate", "eval/draw_rate", "eval/loss_rate", "eval/reward_mean", "eval/turns_mean", "eval/error_rate"]
        for c in columns:
            table.add_column(c, justify="right")
        table.add_row(str(report["n"]), *(f"{m[k]:.3f}" for k in keys))
        return table
    columns = ["n", "samples", "accuracy", "reward mean", "turns", "errors"]
    passes = sorted((k for k in m if k.startswith("eval/pass@")), key=lambda k: int(k.rsplit("@", 1)[1]))
    for c in columns + [k.split("/", 1)[1] for k in passes]:
        table.add_column(c, justify="right")
    row = [
        str(report["n"]),
        str(report["samples"]),
        f"{m['eval/accuracy']:.3f}",
        f"{m['eval/reward_mean']:.3f}",
        f"{m['eval/turns_mean']:.2f}",
        str(int(m["eval/errors"])),
    ]
    table.add_row(*row, *(f"{m[k]:.3f}" for k in passes))
    return table


def export_command(
    source: Annotated[Path, typer.Argument(help=SOURCE_HELP)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory to write (new or empty, unless --force).")],
    merge: Annotated[bool, typer.Option("--merge", help="Write a full model with the LoRA adapter merged in.")] = False,
    base_model: Annotated[str | None, typer.Option("--base-model", help="Portable base model name the adapter records (default: model.name when it is a hub id or 'tiny').")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty output directory.")] = False,
    push_to_hub: Annotated[str | None, typer.Option("--push-to-hub", metavar="REPO", help="Then upload the export to this Hugging Face model repo (created if new; token: HF_TOKEN or `hf auth login`).")] = None,
    private: Annotated[bool, typer.Option("--private", help="With --push-to-hub: create the repo private.")] = False,
) -> None:
    """Write a PEFT adapter (vLLM --lora-modules layout) or a merged full model, with its tokenizer; optionally push it to the Hub."""
    from tinker_algos.commands.evaluation import EvalError
    from tinker_algos.commands.export import BUNDLED_BASE, export
    from tinker_algos.model.device import DeviceError
    from tinker_algos.model.models import ModelLoadError
    from tinker_algos.run.progress import quiet_third_party_progress
    from tinker_core.progress import status

    quiet_third_party_progress()  # no "Loading weights" / "Writing model shards" bars
    if push_to_hub is not None:
        from tinker_algos.hub.upload import PushError, check_push

        try:
            check_push(push_to_hub)
        except PushError as e:
            _fail(str(e))
    try:
        doing = f"loading {source} and writing {'a merged model' if merge else 'its weights'} to {output}"
        result = export(source, output, merge=merge, base_model=base_model, force=force, progress=lambda: status(err_console, doing))
    except (EvalError, ModelLoadError, DeviceError) as e:
        _fail(str(e))
    src = result.source
    where = str(src.checkpoint or src.path) + (f" (step {src.step})" if src.step is not None else "")
    if result.layout == "adapter":
        base = result.base_model if result.base_model != BUNDLED_BASE else f"{BUNDLED_BASE}, saved in {result.output / BUNDLED_BASE}"
        typer.echo(f"exported LoRA adapter of {where} to {result.output} (base model: {base})")
    else:
        how = "merged full model" if src.weights == "adapter" else "full model (a full fine-tuning run)"
        typer.echo(f"exported {how} of {where} to {result.output}")
    if push_to_hub is not None:
        from tinker_algos.hub.upload import push_folder

        try:
            with status(err_console, f"uploading {result.output} to {push_to_hub}"):
                pushed = push_folder(result.output, push_to_hub, private=private, message=f"opentinker export of {where}")
        except PushError as e:
            _fail(str(e))
        typer.echo(f"pushed {result.output} to {pushed.repo_url} ({pushed.commit_url})")


def register(cli: typer.Typer) -> None:
    """Add ``eval`` and ``export`` to the ``opentinker`` app ``cli``."""
    cli.command("eval")(eval_command)
    cli.command("export")(export_command)
