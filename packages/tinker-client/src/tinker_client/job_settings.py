"""``opentinker job set RUN_DIR KEY=VALUE ...``: change a running job's live settings.

The settings that may change while a job runs are :data:`tinker_core.config.live.LIVE_SETTINGS`
(learning rate, sampling temperature, KL coefficient, evaluation cadence; each also per stage).
The command checks the change against the run's ``config.json`` like a config (another setting is
refused with the list of those that may change), then writes it as a request into the run's
``control/`` folder; the run applies it at its next step boundary, logs it in ``metrics.jsonl``
(``live/<key.path>``) and ``live.jsonl``, or refuses it with the reason in ``control/rejected/``.
The run dir of a job on a scheduler is under the scheduler's ``--runs-dir``. No torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tinker_client.console import fail, fail_config
from tinker_core.config import OverrideError, parse_config
from tinker_core.config.live import LIVE_SETTINGS, check_live, write_request
from tinker_core.errors import ConfigError

job_app = typer.Typer(help="Steer a running job.", no_args_is_help=True)


@job_app.command("set")
def job_set(
    run_dir: Annotated[Path, typer.Argument(help="The run dir of the running job.")],
    settings: Annotated[list[str], typer.Argument(help=f"KEY.PATH=VALUE of a live setting: {', '.join(LIVE_SETTINGS)} (or stages.N.<setting>).", metavar="KEY.PATH=VALUE...")],
) -> None:
    """Change live settings of a running job; it applies them at its next step boundary."""
    config_file = run_dir / "config.json"
    if not config_file.is_file():
        fail(f"{run_dir} is not a run directory (it has no config.json)",
             "pass the run dir of a running job (runs/NAME; a scheduler job's is under its --runs-dir)")
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


def register(cli: typer.Typer) -> None:
    """Add the ``job`` group (``job set``) to the ``opentinker`` app ``cli``."""
    cli.add_typer(job_app, name="job")
