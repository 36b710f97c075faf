"""The compare file of ``opentinker compare``: a base job, variants of it, seeds.

::

    base: arithmetic.yaml          # a job YAML (relative to this file), or the job inline
    variants:
      - {name: grpo, set: {}}      # the base itself
      - name: dr_grpo
        set: {stages.2.algorithm.estimator: dr_grpo}
      - name: rloo
        set: ["stages.2.algorithm.estimator=rloo"]   # the override syntax of `opentinker train`
    seeds: 3                       # 0, 1, 2; or a list [0, 7, 11]
    baseline: grpo                 # the variant the others are compared with (default: the first)
    output: runs/compare-estimators   # default: runs/compare-<file stem>
    metrics: [eval/accuracy, eval/reward_mean]   # default: eval/accuracy if every job logged it, else eval/reward_mean

:func:`load_spec` reads and checks it all before any job starts: every variant's merged config
is validated with the job config's pydantic model (and the plugin names), and a
:class:`CompareError` -- one line -- names the first problem: an unknown key (did-you-mean),
a value that equals the base's, two variants that run the same config, a duplicate name, no
seeds, no base, a ``metrics`` entry that no job can log (``eval/vs/<opponent>/...`` of an opponent
a variant's last stage does not list in ``multi_agent.eval_opponents``). :func:`expand` lists the
jobs: one per (variant, seed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_core.config import (
    JobConfig,
    Override,
    OverrideError,
    apply_overrides,
    get_path,
    parse_config,
    parse_override,
    parse_overrides,
    read_config_data,
)
from tinker_core.config.overrides import parse_path
from tinker_core.errors import ConfigError, OpenTinkerError, did_you_mean

KEYS = ("base", "variants", "seeds", "baseline", "output", "metrics")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_SEEDS = 1000
MAX_JOBS = 10_000


class CompareError(OpenTinkerError, ValueError):
    """A compare file that cannot run; the message is one line naming the problem."""


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: tuple[Override, ...]

    @property
    def override_texts(self) -> list[str]:
        return [o.text for o in self.overrides]


@dataclass(frozen=True)
class CompareSpec:
    """A checked compare file: ``base`` is the raw job mapping, ``configs`` each variant's merged
    and validated config (seed not yet set)."""

    path: Path
    base: dict[str, Any]
    base_source: str
    variants: tuple[Variant, ...]
    seeds: tuple[int, ...]
    output: Path
    configs: dict[str, JobConfig] = field(default_factory=dict)
    baseline: str | None = None
    """The variant the report compares the others with (None: the first)."""
    metrics: tuple[str, ...] = ()
    """The metrics the report gives, each in its own section (empty: the automatic one,
    :func:`~tinker_algos.compare.summary.eval_key`)."""


@dataclass(frozen=True)
class JobSpec:
    """One (variant, seed) job: its raw config mapping (seed and name set) and its key."""

    variant: str
    seed: int
    config: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.variant}/seed-{self.seed}"


def _fail(path: Path, message: str) -> CompareError:
    return CompareError(f"{path}: {message}")


def _read_mapping(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CompareError(f"compare file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CompareError(f"{path}: cannot read it: {e}") from None
    except yaml.YAMLError as e:
        raise CompareError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise _fail(path, "expected a mapping with base, variants and seeds")
    return data


def _base(path: Path, value: object) -> tuple[dict[str, Any], str]:
    if value is None:
        raise _fail(path, "no 'base': give the base job inline (a mapping) or the path of a job YAML")
    if isinstance(value, dict):
        return value, f"{path} (inline)"
    if not isinstance(value, str):
        raise _fail(path, f"base: expected a mapping or a file path, got {type(value).__name__}")
    file = (path.parent / value) if not Path(value).is_absolute() else Path(value)
    try:
        data, _ = read_config_data(file)
    except ConfigError as e:
        raise _fail(path, f"base {value}: {e.problems[0]}") from None
    if not isinstance(data, dict):
        raise _fail(path, f"base {value}: expected a mapping of sections")
    return data, str(file)


def _seeds(path: Path, value: object) -> tuple[int, ...]:
    if value is None:
        raise _fail(path, "no 'seeds': give a count N (seeds 0..N-1) or a list of seeds")
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise _fail(path, f"seeds: {value}; give at least 1 (seeds: 3 runs seeds 0, 1, 2)")
        if value > MAX_SEEDS:
            raise _fail(path, f"seeds: {value}; at most {MAX_SEEDS}")
        return tuple(range(value))
    if not isinstance(value, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value):
        raise _fail(path, "seeds: expected a count N or a list of non-negative integers")
    if not value:
        raise _fail(path, "seeds: the list is empty; give at least one seed")
    if len(set(value)) != len(value):
        raise _fail(path, f"seeds: {value} lists a seed twice")
    if len(value) > MAX_SEEDS:
        raise _fail(path, f"seeds: {len(value)} seeds; at most {MAX_SEEDS}")
    return tuple(value)


def _yaml_text(value: object) -> str:
    """``value`` as an override's text that parses back to it: a plain string as it is, anything
    else (and a string YAML would read as something else) as JSON, which YAML reads too."""
    import json

    import yaml

    if isinstance(value, str) and value and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)


def _overrides_of(path: Path, name: str, value: object) -> tuple[Override, ...]:
    """A variant's ``set``: a mapping ``{dotted.path: value}`` or a list of ``key=value`` strings."""
    try:
        if value is None or value == {} or value == []:
            return ()
        if isinstance(value, dict):
            return tuple(Override(parse_path(str(k), text=str(k)), v, f"{k}={_yaml_text(v)}") for k, v in value.items())
        if isinstance(value, list) and all(isinstance(t, str) for t in value):
            return tuple(parse_overrides(value))
        if isinstance(value, str):
            return (parse_override(value),)
    except OverrideError as e:
        raise _fail(path, f"variant {name!r}: {e}") from None
    raise _fail(path, f"variant {name!r}: set: expected a mapping {{dotted.path: value}} or a list of 'key.path=value' strings")


def _variants(path: Path, value: object) -> tuple[Variant, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(path, "variants: expected a list of {name: ..., set: {dotted.path: value}}, at least one")
    out: list[Variant] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise _fail(path, f"variants[{i}]: expected a mapping {{name: ..., set: ...}}")
        extra = [k for k in item if k not in ("name", "set")]
        if extra:
            hint = did_you_mean(str(extra[0]), ["name", "set"])
            raise _fail(path, f"variants[{i}]: unknown key {extra[0]!r}" + (f"; did you mean {hint!r}?" if hint else "; a variant has name and set"))
        name = item.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name) or ".." in name:
            raise _fail(path, f"variants[{i}]: name {name!r}: give 1-64 letters, digits, '.', '_' or '-' (it names the variant's run dirs)")
        if name in seen:
            raise _fail(path, f"variants: the name {name!r} is used twice; give each variant its own name")
        seen.add(name)
        out.append(Variant(name, _overrides_of(path, name, item.get("set"))))
    return tuple(out)


def _metrics(path: Path, value: object) -> tuple[str, ...]:
    """The ``metrics`` list: metric names as logged (``eval/accuracy``), each once."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(m, str) and m.strip() for m in value):
        raise _fail(path, "metrics: expected a list of logged metric names, e.g. [eval/accuracy, eval/reward_mean]")
    spaced = [m for m in value if m != m.strip()]
    if spaced:
        raise _fail(path, f"metrics: {spaced[0]!r}: remove the spaces around the metric's name")
    twice = sorted({m for m in value if value.count(m) > 1})
    if twice:
        raise _fail(path, f"metrics: {', '.join(twice)} listed twice; name each metric once")
    return tuple(value)


def _check_metrics_logged(path: Path, metrics: tuple[str, ...], configs: dict[str, JobConfig]) -> None:
    """What can be known before any job runs: ``eval/vs/<opponent>/...`` is logged only by a last
    stage whose ``multi_agent.eval_opponents`` lists ``<opponent>``."""
    for i, metric in enumerate(metrics):
        parts = metric.split("/")
        if len(parts) < 4 or parts[:2] != ["eval", "vs"]:
            continue
        for name, config in configs.items():
            last = config.resolved_stages()[-1]
            multi_agent = getattr(last.algorithm.params, "multi_agent", None)
            listed = list(multi_agent.eval_opponents or []) if multi_agent is not None else []
            if parts[2] not in listed:
                where = f"stages.{len(config.resolved_stages()) - 1}." if config.stages else ""
                raise _fail(path, f"metrics[{i}]: {metric!r}: variant {name!r} never logs it: its last stage's "
                                  f"{where}algorithm.params.multi_agent.eval_opponents does not list {parts[2]!r} "
                                  f"(it lists: {', '.join(listed) or 'none'})")


def _merge(path: Path, base: dict[str, Any], variant: Variant) -> JobConfig:
    """The variant's validated config; a CompareError for a bad, useless or seed-setting override."""
    for ov in variant.overrides:
        if ov.path[0] in ("seed", "name"):
            raise _fail(path, f"variant {variant.name!r}: {ov.text}: compare sets each job's {ov.path[0]} itself (seeds: the seeds)")
        present, current = get_path(base, ov.path)
        if present and current == ov.value:
            raise _fail(path, f"variant {variant.name!r}: {ov.text} changes nothing (the base has {ov.dotted}: {current!r}); drop it")
    try:
        merged = apply_overrides(base, variant.overrides)
        return parse_config(merged, source=str(path))
    except OverrideError as e:
        raise _fail(path, f"variant {variant.name!r}: {e}") from None
    except ConfigError as e:
        more = f" (and {len(e.problems) - 1} more)" if len(e.problems) > 1 else ""
        raise _fail(path, f"variant {variant.name!r}: {e.problems[0]}{more}") from None


def load_spec(path: str | Path, *, output: str | Path | None = None) -> CompareSpec:
    """Read and check the compare file ``path`` (see the module docstring); ``output`` replaces
    its ``output:``. Raises :class:`CompareError` (one line) before anything runs."""
    path = Path(path)
    data = _read_mapping(path)
    for key in data:
        if key not in KEYS:
            hint = did_you_mean(str(key), KEYS)
            raise _fail(path, f"unknown key {key!r}" + (f"; did you mean {hint!r}?" if hint else f"; the keys are {', '.join(KEYS)}"))
    base, base_source = _base(path, data.get("base"))
    variants = _variants(path, data.get("variants"))
    seeds = _seeds(path, data.get("seeds"))
    baseline = data.get("baseline")
    names = [v.name for v in variants]
    if baseline is not None and baseline not in names:
        hint = did_you_mean(str(baseline), names)
        raise _fail(path, f"baseline: {baseline!r} is not a variant" + (f"; did you mean {hint!r}?" if hint else f"; the variants are {', '.join(names)}"))
    if len(variants) * len(seeds) > MAX_JOBS:
        raise _fail(path, f"{len(variants)} variants x {len(seeds)} seeds is over {MAX_JOBS:,} jobs")
    out = Path(output) if output is not None else Path(data["output"]) if data.get("output") else Path("runs") / f"compare-{path.stem}"
    try:
        parse_config(base, source=base_source)
    except ConfigError as e:
        raise _fail(path, f"base: {e.problems[0]}") from None
    configs: dict[str, JobConfig] = {}
    for variant in variants:
        configs[variant.name] = _merge(path, base, variant)
    dumped: dict[str, str] = {}
    base_dump = JobConfig.model_validate(base).model_dump_json()
    for variant in variants:
        dump = configs[variant.name].model_dump_json()
        if variant.overrides and dump == base_dump:
            raise _fail(path, f"variant {variant.name!r}: its settings change nothing (they are the base's defaults); drop them or the variant")
        twin = next((n for n, d in dumped.items() if d == dump), None)
        if twin is not None:
            raise _fail(path, f"variants {twin!r} and {variant.name!r} run the same config; make them differ or drop one")
        dumped[variant.name] = dump
    metrics = _metrics(path, data.get("metrics"))
    _check_metrics_logged(path, metrics, configs)
    return CompareSpec(path, base, base_source, variants, seeds, out, configs, baseline or names[0], metrics)


def job_name(spec: CompareSpec, variant: str, seed: int) -> str:
    """``<base name>-<variant>-s<seed>``, cut to a valid job name (at most 128 characters)."""
    base = str(spec.base.get("name") or "job")
    return f"{base}-{variant}-s{seed}"[-128:].lstrip("._-") or f"{variant}-s{seed}"


def expand(spec: CompareSpec) -> list[JobSpec]:
    """Every (variant, seed) job, variant by variant, each with its raw config mapping."""
    jobs = []
    for variant in spec.variants:
        merged = apply_overrides(spec.base, variant.overrides)
        for seed in spec.seeds:
            config = {**merged, "seed": seed, "name": job_name(spec, variant.name, seed)}
            jobs.append(JobSpec(variant.name, seed, config))
    return jobs
