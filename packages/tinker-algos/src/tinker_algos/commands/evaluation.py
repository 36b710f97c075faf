"""Held-out evaluation of a trained policy: ``opentinker eval`` (:mod:`tinker_algos.commands.cli_eval`).

:func:`find_source` tells what a path names -- a run directory (its newest intact checkpoint), a
run checkpoint (``checkpoints/step-N``), a trainer checkpoint, a saved PEFT adapter, a Hugging
Face model directory, or a job config file (its model untrained: the baseline a run starts from,
on the same held-out problems its training evaluates) -- and :func:`load_policy` loads it with the existing loaders
(:meth:`PolicyModel.load`, :meth:`PolicyModel.load_adapter`). :func:`evaluate_source` runs the
episodes through :func:`tinker_algos.rollout.rollout` with the settings held-out evaluation
uses during training (the stage's env with its ``eval_kwargs``, ``rollout.max_new_tokens``,
``stop`` and ``max_turns``, ``algorithm.eval_size`` episodes, seeds from
``derive_seed(seed, "eval")``), so the greedy accuracy of a run's last checkpoint is the
``eval/accuracy`` its training reported.

An agent program (``agent/program-v0``) is played by its program through the rollout proxy,
its eval tasks in order, as training's held-out evaluation plays it.

With ``samples=k > 1`` every problem is sampled ``k`` times (the rollout's temperature, 1.0 when
that is 0) and ``pass@j`` is the unbiased estimator of Chen et al. (2021), :func:`pass_at_k`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from tinker_algos.algorithms.learners import ROLES_DIR
from tinker_algos.commands.evaluation_settings import (
    MAX_EVAL_PROBLEMS,  # noqa: F401  (re-exported)
    MAX_EVAL_SAMPLES,  # noqa: F401  (re-exported)
    EvalError,
    EvalSettings,
    check_counts,
    check_env,
    eval_settings,
    split_size,
)
from tinker_algos.commands.pass_at_k import pass_at_k, pass_ks  # noqa: F401  (re-exported: tinker_algos.commands.evaluation.pass_at_k)
from tinker_algos.model.models import PolicyModel
from tinker_algos.records.run_dir import RUN_MARKER
from tinker_algos.rollout.episodes import env_factories
from tinker_algos.run.job import ADAPTER, RUN_CHECKPOINT_KIND
from tinker_algos.run.resume import run_checkpoints, verified_progress
from tinker_algos.training.checkpoint import KIND as TRAINER_CHECKPOINT_KIND
from tinker_algos.training.checkpoint import (
    MANIFEST,
    CheckpointError,
    read_json_object,
    verify,
)
from tinker_core.config import (
    JobConfig,
    load_config,
    parse_config,
)
from tinker_core.errors import ConfigError, OpenTinkerError

SourceKind = Literal["run", "checkpoint", "adapter", "model", "config"]


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
"""A file with one of these suffixes given to :func:`find_source` is read as a job config."""


@dataclass(frozen=True)
class Source:
    """What a path given to ``opentinker eval``/``export`` names, resolved to weights on disk.

    ``weights`` is ``"adapter"`` (``weights_dir`` is a peft adapter directory, applied to
    ``base_model``), ``"full"`` (``weights_dir`` is a ``save_pretrained`` model + tokenizer) or
    ``"base"`` (a job config: its ``model`` section loaded as training starts from it).
    ``job`` is the run's config when the source lies in a run directory, else None.
    """

    kind: SourceKind
    path: Path
    weights: Literal["adapter", "full", "base"]
    weights_dir: Path
    base_model: str | None
    job: JobConfig | None
    checkpoint: Path | None = None
    step: int | None = None
    #: newer checkpoints of the run that were skipped as damaged: ``"<dir>: <why>"``
    skipped: tuple[str, ...] = ()
    #: a ``learners`` run checkpoint's own adapter of each role (``roles/<role>/adapter``)
    role_adapters: tuple[tuple[str, Path], ...] = ()


def _read_json(f: Path) -> dict[str, Any]:
    return read_json_object(f, EvalError)


def _run_job(run_dir: Path) -> JobConfig | None:
    """The job config of run directory ``run_dir`` (its ``config.json``), None when it is no run
    (a run has the marker, or -- written before markers -- a ``checkpoints/`` directory)."""
    f = run_dir / "config.json"
    is_run = (run_dir / RUN_MARKER).is_file() or (run_dir / "checkpoints").is_dir()
    if not is_run or not f.is_file():
        return None
    try:
        return parse_config(_read_json(f))
    except OpenTinkerError as e:
        raise EvalError(f"{f}: the run's config does not validate: {e}") from None


def _enclosing_job(path: Path) -> JobConfig | None:
    """The config of the run directory ``path`` lies in (up to four levels up), else None."""
    for parent in list(path.resolve().parents)[:4]:
        job = _run_job(parent)
        if job is not None:
            return job
    return None


def _from_trainer_checkpoint(kind: SourceKind, path: Path, trainer: Path, job: JobConfig | None, step: int | None) -> Source:
    manifest = _read_json(trainer / MANIFEST)
    if manifest.get("kind") != TRAINER_CHECKPOINT_KIND:
        raise EvalError(f"{trainer / MANIFEST} is not an OpenTinker checkpoint manifest")
    contents = manifest.get("contents") or []
    weights: Literal["adapter", "full"] = "adapter" if "adapter" in contents else "full"
    weights_dir = trainer / ("adapter" if weights == "adapter" else "model")
    base = job.model.name if job is not None else manifest.get("base_model")
    step = step if step is not None else manifest.get("step")
    checkpoint = trainer.parent if trainer.name == "trainer" else trainer
    roles = checkpoint / ROLES_DIR  # a run checkpoint of a learners stage: an adapter per role
    role_adapters: tuple[tuple[str, Path], ...] = ()
    if trainer.name == "trainer" and roles.is_dir():
        role_adapters = tuple((d.name, d / "adapter") for d in sorted(roles.iterdir()) if (d / "adapter").is_dir())
    return Source(kind, path, weights, weights_dir, base, job, checkpoint=checkpoint, step=step, role_adapters=role_adapters)


def find_source(path: str | Path, *, overrides: Iterable[str] = ()) -> Source:
    """Resolve ``path`` (see the module docstring); an :class:`EvalError` names what is wrong.

    ``overrides`` (``key.path=value``) apply to a job config source only (an
    :class:`~tinker_core.config.OverrideError` when one is bad).

    A run directory resolves to its newest intact checkpoint (damaged newer ones are skipped);
    a checkpoint directory is checked against its manifest's checksums first.
    """
    path = Path(path)
    overrides = list(overrides)
    if not path.exists():
        raise EvalError(f"{path} does not exist")
    is_config = path.is_file() and path.suffix in CONFIG_SUFFIXES
    if overrides and not is_config:
        raise EvalError(f"overrides ({overrides[0]} ...) apply to a job config (.yaml) source; {path} is not one")
    if is_config:
        try:
            job = load_config(path, overrides=overrides)
        except ConfigError as e:
            raise EvalError(f"job config {path}: " + "; ".join(e.problems)) from None
        return Source("config", path, "base", path, job.model.name, job)
    if not path.is_dir():
        raise EvalError(
            f"{path} is not a directory or a job config (give a run directory, a checkpoint, an adapter, "
            "a model directory, or a .yaml job config to evaluate its untrained model)"
        )
    job = _run_job(path)
    if job is not None or (path / "checkpoints").is_dir():
        found = run_checkpoints(path)
        skipped: list[str] = []
        for ckpt in reversed(found):
            try:
                progress, _verified = verified_progress(ckpt)
            except CheckpointError as e:
                skipped.append(f"{ckpt}: {e}")
                continue
            source = _from_trainer_checkpoint("run", path, ckpt / "trainer", job, progress.global_step)
            return replace(source, skipped=tuple(skipped))
        what = f"all {len(found)} checkpoints in it are damaged" if found else "it has no checkpoint yet (checkpoints/step-N)"
        raise EvalError(f"run directory {path}: {what}")
    if (path / MANIFEST).is_file():
        kind = _read_json(path / MANIFEST).get("kind")
        if kind not in (RUN_CHECKPOINT_KIND, TRAINER_CHECKPOINT_KIND):
            raise EvalError(f"{path / MANIFEST} is not an OpenTinker checkpoint manifest (kind={kind!r})")
        try:
            verify(path)
        except CheckpointError as e:
            raise EvalError(f"checkpoint {path} is damaged: {e}") from None
        if kind == RUN_CHECKPOINT_KIND:
            step = _read_json(path / "progress.json").get("global_step")
            return _from_trainer_checkpoint("checkpoint", path, path / "trainer", _enclosing_job(path), step)
        return _from_trainer_checkpoint("checkpoint", path, path, _enclosing_job(path), None)
    if (path / "adapter_config.json").is_file():
        base = _read_json(path / "adapter_config.json").get("base_model_name_or_path")
        if isinstance(base, str) and base and not Path(base).is_absolute() and (path / base / "config.json").is_file():
            base = str(path / base)  # a base saved inside the export names it relative to the export
        job = _enclosing_job(path)
        return Source("adapter", path, "adapter", path, job.model.name if job else base, job)
    if (path / "config.json").is_file() and "model_type" in _read_json(path / "config.json"):
        return Source("model", path, "full", path, None, _enclosing_job(path))
    raise EvalError(
        f"{path} is not a run directory, a checkpoint, a PEFT adapter or a model directory "
        f"(none of {RUN_MARKER}, checkpoints/, {MANIFEST}, adapter_config.json, config.json is there)"
    )


def load_policy(source: Source, *, base_model: str | None = None, device: str | None = None) -> tuple[PolicyModel, str | None]:
    """``(policy, adapter)``: the source's weights loaded, and the adapter to evaluate (None: full weights).

    An adapter is applied to ``base_model`` (default: the run's ``model.name``, else the name
    the adapter or checkpoint records) with the run's tokenizer and revision.
    """
    from tinker_algos.model.device import resolve_device

    job = source.job
    spec = resolve_device(device or (job.model.device if job else "cpu"), job.model.precision if job else None)
    if source.weights == "full":
        return PolicyModel.load(source.weights_dir, spec=spec), None
    if source.weights == "base" and job is not None:
        policy = PolicyModel.load(base_model or job.model.name, spec=spec, tokenizer=job.model.tokenizer, revision=job.model.revision)
        policy.model.eval()
        return policy, None
    base = base_model or source.base_model
    if not base:
        raise EvalError(f"{source.path}: no base model is recorded for this adapter; pass --base-model NAME")
    tokenizer = job.model.tokenizer if job and not base_model else None
    revision = job.model.revision if job and not base_model else None
    policy = PolicyModel.load(base, spec=spec, tokenizer=tokenizer, revision=revision)
    policy.load_adapter(ADAPTER, source.weights_dir)
    policy.model.eval()
    return policy, ADAPTER


# ---- the evaluation -----------------------------------------------------------------------------
@dataclass
class EvalReport:
    """An evaluation's settings, metrics (``eval/...``) and episodes; ``to_dict`` is the JSON written."""

    source: str
    kind: str
    step: int | None
    env: str
    env_kwargs: dict[str, Any]
    n: int
    samples: int
    metrics: dict[str, float]
    episodes: list[dict[str, Any]] = field(default_factory=list)
    #: a multi-agent game's scripted opponent (None: a single-agent env)
    opponent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_role_adapters(policy: PolicyModel, source: Source) -> dict[str, str]:
    """Each role's own adapter of a ``learners`` run checkpoint loaded into ``policy``: ``{role: adapter name}``
    (empty for any other source)."""
    for role, path in source.role_adapters:
        policy.load_adapter(f"{ADAPTER}-{role}", path)
    return {role: f"{ADAPTER}-{role}" for role, _ in source.role_adapters}


def run_eval(
    policy: PolicyModel, settings: EvalSettings, *, adapter: str | None = None, adapters: dict[str, str] | None = None
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """``(metrics, episodes)`` of ``settings.n`` problems, each played ``settings.samples`` times.

    A multi-agent game is played as training's held-out evaluation plays it
    (:func:`~tinker_algos.multiagent.grpo.evaluate_multi_agent`: greedy, game ``i`` with seed
    ``seed + i`` and the policy in seat ``i % roles``, ``adapters[role]`` when given, against
    ``settings.opponent``); its metrics are the outcome rates overall, per role and per seat, and
    it returns no episodes.

    One sample a problem is greedy (temperature 0); more are sampled at ``settings.temperature``.
    Metrics, as training's held-out evaluation computes them: ``eval/accuracy`` (episodes
    reaching the top reward), ``eval/reward_mean``, ``eval/turns_mean`` (over the episodes
    without an error); ``eval/errors`` (episodes an env error ended), ``eval/n``; with samples,
    ``eval/pass@k`` per problem (an episode with an error counts as wrong).
    """
    from tinker_algos.records.recording import record_eval
    from tinker_algos.sampling.sampler import SamplingParams

    k = settings.samples
    greedy = k == 1
    params = SamplingParams(
        max_new_tokens=settings.max_new_tokens,
        temperature=0.0 if greedy else settings.temperature,
        top_p=1.0 if greedy else settings.top_p,
        top_k=0 if greedy else settings.top_k,
        stop=settings.stop,
        seed=settings.seed,
    )
    seeds = [settings.seed + i for i in range(settings.n)]
    _train, factory = env_factories(settings.env)
    assert factory is not None
    extra: dict[str, Any] = {}
    if settings.chat_template is not None or settings.env.system_prompt is not None:  # the prompts the run trained on
        from tinker_algos.model.prompts import PromptRenderer

        renderer = PromptRenderer.from_config(policy.tokenizer, settings.chat_template or "auto")
        extra["renderer"] = renderer.with_system_prompt(settings.env.system_prompt)
    if settings.opponent is not None:  # a multi-agent game (evaluate_source sets it for one)
        from tinker_algos.multiagent.grpo import evaluate_multi_agent

        metrics = evaluate_multi_agent(
            policy, factory, settings.n, seed=settings.seed, max_new_tokens=settings.max_new_tokens, stop=settings.stop,
            opponent_name=settings.opponent, adapter=adapter, adapters=adapters or None,
            turn_timeout_s=settings.turn_timeout_s, max_steps=settings.max_turns, **extra,
        )
        return {**metrics, "eval/n": float(settings.n)}, []
    result = _play(policy, settings, factory, seeds, params, adapter, extra)
    record_eval(result, policy.tokenizer)  # the transcripts, inside tinker_algos.records.recording.transcripts(...)
    m = result.metrics(prefix="eval")
    firsts = [e for e in result.episodes if getattr(e, "segment", 0) == 0]  # an agent episode's later segments are rows too
    ok = [e.success and e.error is None for e in firsts]
    metrics = {
        "eval/accuracy": m["eval/success_rate"],
        "eval/reward_mean": m["eval/reward_mean"],
        "eval/turns_mean": m["eval/turns_mean"],
        "eval/errors": float(sum(e.error is not None for e in firsts)),
        "eval/n": float(settings.n),
    }
    if not greedy:
        per_problem = [sum(ok[i * k : (i + 1) * k]) for i in range(settings.n)]
        for j in pass_ks(k):
            metrics[f"eval/pass@{j}"] = sum(pass_at_k(k, c, j) for c in per_problem) / settings.n
    episodes = [
        {
            "seed": int(seeds[e.group]),
            "reward": e.reward,
            "success": e.success,
            "turns": e.turns,
            "error": e.error,
            "transcript": [list(t) for t in e.transcript],
        }
        for e in firsts
    ]
    return metrics, episodes


def _play(
    policy: PolicyModel, settings: EvalSettings, factory: Callable[[], Any], seeds: list[int], params: Any, adapter: str | None,
    extra: dict[str, Any],
) -> Any:
    """The episodes of :func:`run_eval`, ``settings.samples`` a problem: an env's rollout, or an
    agent program's episodes through the rollout proxy (its eval tasks in order, as training's
    held-out evaluation plays them)."""
    from tinker_algos.rollout import agent_program
    from tinker_algos.rollout.episodes import rollout

    k = settings.samples
    if agent_program.is_agent_program(settings.env):
        program = factory()
        tasks = [program.task(i) for i in range(settings.n)]
        return agent_program.agent_rollout(policy, program, seeds, replace(params, stop=()), group_size=k, adapter=adapter,
                                           tasks=tasks, renderer=extra.get("renderer"))
    return rollout(policy, factory, seeds, params, group_size=k, max_turns=settings.max_turns, adapter=adapter, **extra)


def evaluate_source(
    source: Source,
    settings: EvalSettings,
    *,
    base_model: str | None = None,
    device: str | None = None,
    progress: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> EvalReport:
    """Load ``source`` and evaluate it with ``settings`` (the env is checked before the model
    loads); ``progress()`` is entered while the model loads and plays (a status line)."""
    opponent = check_env(settings)  # None: a single-agent env
    settings = replace(settings, opponent=opponent)
    with progress():
        policy, adapter = load_policy(source, base_model=base_model, device=device)
        adapters = load_role_adapters(policy, source) if opponent is not None else None
        metrics, episodes = run_eval(policy, settings, adapter=adapter, adapters=adapters)
    return EvalReport(
        source=str(source.checkpoint or source.path),
        kind=source.kind,
        step=source.step,
        env=settings.env.id,
        env_kwargs=settings.eval_kwargs,
        n=settings.n,
        samples=settings.samples,
        metrics=metrics,
        episodes=episodes,
        opponent=settings.opponent,
    )


def default_output(source: Source, env_id: str) -> Path:
    """Where the JSON goes without ``--output``: ``<run>/eval/step-N-<env>.json`` for a run,
    else ``runs/eval/<name>-<what>-<env>.json`` under the current directory (never into it:
    a baseline evaluated in a repository would land in its root): ``<name>`` is the job's name
    (a job config, a checkpoint in a run) or the file's, ``<what>`` is ``baseline`` for a job
    config, ``step-N`` for a checkpoint, else the source's kind."""
    from tinker_algos.commands.cli import RUNS

    slug = env_id.replace("/", "_")
    if source.kind == "run":
        return source.path / "eval" / f"step-{source.step or 0:06d}-{slug}.json"
    name = source.job.name if source.job is not None else source.path.stem if source.path.is_file() else source.path.name
    what = "baseline" if source.kind == "config" else f"step-{source.step:06d}" if source.step is not None else source.kind
    return RUNS / "eval" / f"{name}-{what}-{slug}.json"


__all__: Sequence[str] = (
    "EvalError",
    "EvalReport",
    "EvalSettings",
    "Source",
    "check_counts",
    "check_env",
    "load_role_adapters",
    "default_output",
    "eval_settings",
    "evaluate_source",
    "find_source",
    "load_policy",
    "pass_at_k",
    "pass_ks",
    "run_eval",
    "split_size",
)
