"""The Python API at the front door: :func:`train`, :func:`fork`, :func:`evaluate`, :func:`load_policy`.

The same three things the command line does (``opentinker train``, ``opentinker eval``, and
loading what a run trained), as functions::

    import opentinker

    result = opentinker.train("job.yaml", seed=1)            # a run under runs/<name>
    metrics = opentinker.evaluate(result.run_dir)            # {"eval/accuracy": ..., ...}
    opentinker.fork(f"{result.run_dir}@50", ["optimizer.lr=1e-4"])  # a new run from step 50
    model, tokenizer = opentinker.load_policy(result.run_dir)

Importing this module is cheap: torch and the training engine (``tinker_algos``, installed by
``pip install "opentinker[train]"``) load when a function runs. Keyword overrides replace
top-level sections or fields of the job config (``seed=1``, ``algorithm={...}``); nested
``key.path=value`` overrides are the command line's (``opentinker train job.yaml key.path=value``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - type-only: importing these needs the train extra
    from tinker_algos.run.job import TrainResult
    from tinker_core.config import JobConfig

RUNS = Path("runs")
"""Without ``run_dir``, :func:`train` writes under ``runs/<config name>``, as ``opentinker train`` does."""

TRAIN_EXTRA = 'pip install "opentinker[train]"'


class MissingExtraError(ImportError):
    """The function needs the training engine, which this installation lacks (the message says how to add it)."""


def _engine(module: str) -> Any:
    """``import module`` from tinker_algos, or a :class:`MissingExtraError` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name is not None and not e.name.startswith("tinker_algos"):
            raise
        raise MissingExtraError(f"opentinker's Python API needs the training engine (tinker-algos): {TRAIN_EXTRA}") from e


def job_config(config: JobConfig | Mapping[str, Any] | str | Path, *, check_plugins: bool = True, **overrides: Any) -> JobConfig:
    """The validated job config of ``config`` (a :class:`~tinker_core.config.JobConfig`, a
    mapping, or a path to a YAML/JSON file) with each keyword in ``overrides`` replacing that
    top-level field or section (``seed=1``, ``name="try-2"``, ``algorithm={"name": "grpo", ...}``).

    A bad config or override raises :class:`tinker_core.errors.ConfigError` listing every problem.
    ``check_plugins``: also check that the env, algorithm and optimizer names are installed
    plugins (as ``opentinker config validate`` does); False checks the schema only.
    """
    from tinker_core.config import JobConfig, load_config, parse_config

    if isinstance(config, JobConfig):
        job = config
    elif isinstance(config, Mapping):
        job = parse_config(dict(config), check_plugins=check_plugins)
    elif isinstance(config, str | Path):
        job = load_config(Path(config), check_plugins=check_plugins)
    else:
        raise TypeError(f"config must be a JobConfig, a mapping or a path to a YAML file, not {type(config).__name__}")
    if not overrides:
        return job
    data = job.model_dump(mode="json", exclude_unset=True)
    for key, value in overrides.items():
        data[key] = value.model_dump(mode="json", exclude_unset=True) if hasattr(value, "model_dump") else value
    source = "keyword overrides" if isinstance(config, JobConfig | Mapping) else str(config)
    return parse_config(data, source=source, check_plugins=check_plugins)


def train(
    config: JobConfig | Mapping[str, Any] | str | Path,
    run_dir: str | Path | None = None,
    **overrides: Any,
) -> TrainResult:
    """Run (or resume) a training job in this process; return its :class:`~tinker_algos.run.TrainResult`.

    ``config``: a :class:`~tinker_core.config.JobConfig`, a dict, or a path to a YAML job config.
    ``run_dir``: where metrics, checkpoints and plots go (default ``runs/<name>``, as the
    ``opentinker train`` command). ``overrides``: top-level replacements, see :func:`job_config`.
    A run directory that already holds a checkpoint is resumed (``checkpoint.resume``).
    """
    run = _engine("tinker_algos.run.job")  # first: without the engine, say how to install it
    job = job_config(config, **overrides)
    target = Path(run_dir) if run_dir is not None else RUNS / job.name
    return run.train(job, run_dir=target)


def fork(
    run: str | Path,
    overrides: Sequence[str] = (),
    *,
    step: int | None = None,
    run_dir: str | Path | None = None,
) -> TrainResult:
    """Fork a run, as ``opentinker fork RUN[@STEP] KEY=VALUE...`` does; train the fork, return its result.

    ``run``: a run directory, or ``"RUN@STEP"`` for its checkpoint at STEP (default: its newest;
    ``step`` says it too). ``overrides``: ``key.path=value`` strings (``"stages.2.optimizer.lr=1e-4"``).
    ``run_dir``: the fork's directory (default ``RUN-fork-STEP`` beside the parent). The fork goes
    on from the checkpoint's weights, optimizer state, RNG and data position, records its parent in
    ``lineage.json``, and without overrides repeats the parent's later metrics exactly.
    """
    return _engine("tinker_algos.run.forking").fork(run, list(overrides), step=step, run_dir=run_dir)


def evaluate(
    source: JobConfig | Mapping[str, Any] | str | Path,
    *,
    env: str | None = None,
    split: str | None = None,
    n: int | None = None,
    samples: int = 1,
    max_new_tokens: int | None = None,
    seed: int | None = None,
    base_model: str | None = None,
    device: str | None = None,
    output: str | Path | None = None,
) -> dict[str, float]:
    """Evaluate on an env's held-out problems, as ``opentinker eval`` does; return the metrics.

    ``source``: a run directory (its newest intact checkpoint), a checkpoint, a saved adapter, a
    model directory (with ``env``), or a job config -- a path to a YAML file, a dict or a
    :class:`~tinker_core.config.JobConfig` -- whose untrained model is the baseline. The other
    arguments are the command's options (``--env``, ``--split``, ``--n``, ...). The metrics are
    ``eval/accuracy``, ``eval/reward_mean``, ``eval/turns_mean``, ``eval/errors`` and, with
    ``samples > 1``, ``eval/pass@k``. ``output``: also write the full JSON report there (the
    command's ``--output``; without it nothing is written).
    """
    evaluation = _engine("tinker_algos.commands.evaluation")
    progress = _engine("tinker_algos.run.progress")
    progress.quiet_third_party_progress()
    if isinstance(source, str | Path):
        src = evaluation.find_source(source)
    else:
        job = job_config(source)
        src = evaluation.Source("config", Path(job.name), "base", Path(job.name), job.model.name, job)
    settings = evaluation.eval_settings(src.job, env_id=env, split=split, n=n, samples=samples,
                                        max_new_tokens=max_new_tokens, seed=seed)
    report = evaluation.evaluate_source(src, settings, base_model=base_model, device=device)
    if output is not None:
        import json

        target = Path(output)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(report.to_dict(), indent=1) + "\n", encoding="utf-8")
    return dict(report.metrics)


def load_policy(source: str | Path, *, base_model: str | None = None, device: str | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the policy a run trained, ready for ``model.generate``.

    ``source`` is what :func:`evaluate` takes as a path: a run directory (its newest intact
    checkpoint), a checkpoint, a saved adapter or a model directory. A LoRA run gives a
    ``peft.PeftModel`` (its adapter active), a full fine-tuning run a transformers model; both in
    eval mode, on ``device`` (default: the run's ``model.device``).
    """
    evaluation = _engine("tinker_algos.commands.evaluation")
    progress = _engine("tinker_algos.run.progress")
    progress.quiet_third_party_progress()
    src = evaluation.find_source(source)
    policy, adapter = evaluation.load_policy(src, base_model=base_model, device=device)
    if adapter is not None:
        policy.set_adapter(adapter)
    model = policy.module
    model.eval()
    return model, policy.tokenizer


__all__ = ["MissingExtraError", "evaluate", "job_config", "load_policy", "train"]
