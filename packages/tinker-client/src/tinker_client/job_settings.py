"""``opentinker job set RUN_DIR|JOB_ID KEY=VALUE ...``: change a running job's live settings.

The settings that may change while a job runs are :data:`tinker_core.config.live.LIVE_SETTINGS`
(learning rate, sampling temperature, KL coefficient, evaluation cadence; each also per stage).
Given a run dir (a path that exists), the command checks the change against the run's
``config.json`` like a config (another setting is refused with the list of those that may
change), then writes it as a request into the run's ``control/`` folder. Given a job id, it sends
the change to the scheduler (``--scheduler``; the JobService's SetSettings), which checks it the
same way against the job's config and writes it into the job's run dir. Either way the run
applies it at its next step boundary, logs it in ``metrics.jsonl`` (``live/<key.path>``) and
``live.jsonl``, or refuses it with the reason in ``control/rejected/``. No torch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from tinker_client.console import fail, fail_config
from tinker_client.scheduler_options import ApiKeyOpt, SchedulerOpt, TlsCaOpt, scheduler_client
from tinker_core.config import OverrideError, parse_config
from tinker_core.config.live import LIVE_SETTINGS, check_live, live_setting, write_request
from tinker_core.errors import ConfigError

job_app = typer.Typer(help="Steer a job: change a running one's live settings, fork one on a scheduler.",
                      no_args_is_help=True)


@job_app.command("set")
def job_set(
    target: Annotated[str, typer.Argument(help="The run dir of the running job, or its job id on a scheduler.", metavar="RUN_DIR|JOB_ID")],
    settings: Annotated[list[str], typer.Argument(help=f"KEY.PATH=VALUE of a live setting: {', '.join(LIVE_SETTINGS)} (or stages.N.<setting>).", metavar="KEY.PATH=VALUE...")],
    scheduler: SchedulerOpt = None,
    api_key: ApiKeyOpt = None,
    tls_ca: TlsCaOpt = None,
) -> None:
    """Change live settings of a running job (its run dir, or its id on a scheduler); it applies them at its next step boundary."""
    if Path(target).exists():
        set_in_run_dir(Path(target), settings)
    elif "/" in target or os.sep in target:  # a job id has none
        fail(f"{target} is not a run directory (it does not exist)",
             "pass the run dir of a running job, or its job id on a scheduler (with --scheduler)")
    else:
        set_on_scheduler(target, settings, scheduler, api_key, tls_ca)


def set_in_run_dir(run_dir: Path, settings: list[str]) -> None:
    """Check ``settings`` against the run's ``config.json`` and write them into its ``control/``."""
    config_file = run_dir / "config.json"
    if not config_file.is_file():
        fail(f"{run_dir} is not a run directory (it has no config.json)",
             "pass the run dir of a running job (runs/NAME), or a scheduler job's id")
    try:
        job = parse_config(json.loads(config_file.read_text(encoding="utf-8")), check_plugins=False)
        check_live(job, settings, source=f"{run_dir} live settings")
    except OverrideError as e:
        fail(str(e))
    except ConfigError as e:
        fail_config(config_file, e)
    except ValueError as e:  # config.json unreadable
        fail(f"{config_file}: {e}")
    request = write_request(run_dir, settings)
    typer.echo(f"requested {' '.join(settings)} ({request.name}); the run applies it at its next step boundary "
               f"(applied: {run_dir / 'live.jsonl'}; refused: {run_dir / 'control' / 'rejected'})")


def set_on_scheduler(job_id: str, settings: list[str], scheduler: str | None, api_key: str | None, tls_ca: Path | None) -> None:
    """Send ``settings`` of job ``job_id`` to the scheduler (it checks them against the job's config)."""
    try:  # a setting that is not live is refused here, before the round trip
        for text in settings:
            live_setting(text)
    except OverrideError as e:
        fail(str(e))
    with scheduler_client(scheduler, api_key, tls_ca) as client:
        answer = client.set_settings(job_id, settings)
    run_dir = Path(answer.job.run_dir)
    typer.echo(f"requested {' '.join(settings)} of job {job_id} ({answer.request}); the job applies it at its next "
               f"step boundary (on the scheduler's storage, applied: {run_dir / 'live.jsonl'}; "
               f"refused: {run_dir / 'control' / 'rejected'})")


def register(cli: typer.Typer) -> None:
    """Add the ``job`` group (``job set``, ``job fork``) to the ``opentinker`` app ``cli``."""
    from tinker_client.job_fork import register as register_fork

    register_fork(job_app)
    cli.add_typer(job_app, name="job")
