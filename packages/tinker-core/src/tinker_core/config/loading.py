"""Loading a job config: YAML or a mapping -> a validated :class:`JobConfig`, or one
:class:`ConfigError` listing every problem with its field path and a fix."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError

from tinker_core.config.models import ALGORITHM_MODELS, ALGORITHMS, JobConfig, models_in
from tinker_core.config.overrides import apply_overrides
from tinker_core.config.recording import TRACKERS
from tinker_core.errors import ConfigError, UnknownNameError, did_you_mean

MAX_CONFIG_BYTES = 1024 * 1024
"""The largest job config accepted (1 MiB): a config is settings, not data; data goes in files."""


def check_config_size(size: int, source: str | None = None) -> None:
    """Raise :class:`ConfigError` when a config of ``size`` bytes is over :data:`MAX_CONFIG_BYTES`."""
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            [f"the config is {size:,} bytes; at most {MAX_CONFIG_BYTES:,} (1 MiB) -- put data in files "
             "(algorithm.data) instead of the config"],
            source,
        )


MAX_CONFIG_DEPTH = 64
"""How deeply a job config may nest mappings and lists (a real one uses a handful of levels)."""

CONFIG_TOO_DEEP = (f"nested deeper than {MAX_CONFIG_DEPTH} levels; a job config needs a handful -- "
                   "flatten the deeply nested value")
"""The problem reported for a config nested past :data:`MAX_CONFIG_DEPTH` (also when the parser
itself gives up with a :class:`RecursionError`)."""


def check_config_shape(data: Any, text_length: int, source: str | None = None) -> None:
    """Raise :class:`ConfigError` when parsed config ``data`` nests deeper than
    :data:`MAX_CONFIG_DEPTH` or holds more values (keys, items and scalars) than its text of
    ``text_length`` characters could without YAML aliases (an alias bomb: a few hundred bytes can
    stand for billions of values). Run it on the parsed data before validating or dumping it; the
    walk stops at the first excess."""
    budget = max(text_length, 1000)  # without aliases every value takes at least a character
    count, stack = 1, [(data, 0)]
    while stack:  # each value is counted as it is pushed: the stack stays within the count
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= MAX_CONFIG_DEPTH:
                raise ConfigError([CONFIG_TOO_DEEP], source)
            items = list(value.values()) if isinstance(value, dict) else value
            count += len(items) * (2 if isinstance(value, dict) else 1)
            if count > budget:
                raise ConfigError(
                    [f"its YAML aliases expand to over {budget:,} values (more than the text has bytes); "
                     "write the values out instead of repeating aliases"],
                    source,
                )
            stack.extend((item, depth + 1) for item in items)


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _tag_of(model: type[BaseModel]) -> Any:
    """The ``name`` literal that selects ``model`` in a discriminated union (None if it has none)."""
    field = model.model_fields.get("name")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    return get_args(field.annotation)[0]


def _walk(loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], type[BaseModel] | None]:
    """An error location as the user wrote it, and the model at its end (None: not a model).

    pydantic puts the tag of a discriminated union into the location (``algorithm.ppo.params``);
    the file has no such level, so the tag is dropped and the tagged model followed.
    """
    model: type[BaseModel] | None = JobConfig
    parts, out = list(loc), []
    while parts:
        part = parts.pop(0)
        out.append(part)
        if isinstance(part, int):
            continue  # a list index: the items' model stays current
        field = model.model_fields.get(part) if model is not None else None
        variants = models_in(field.annotation) if field is not None else []
        tagged = {_tag_of(m): m for m in variants if _tag_of(m) is not None}
        if len(variants) > 1 and parts and parts[0] in tagged:
            model = tagged[parts.pop(0)]
        else:
            model = variants[0] if len(variants) == 1 else None
    return tuple(out), model


def format_validation_error(err: ValidationError) -> list[str]:
    """One line per problem: the field path as written in the file, what is wrong, the value."""
    return _format_errors(list(err.errors()))


def _errors_behind_the_tag(e: Any, tag: str | None) -> list[Any]:
    """The errors in the rest of an algorithm section whose ``name`` is wrong, as pydantic would
    report them for ``tag`` (the name the user most likely meant), so a misspelled name does not
    hide a misspelled field; without a likely name, the keys no algorithm takes."""
    section = e.get("input")
    if not isinstance(section, dict):
        return []
    loc = tuple(e["loc"])
    if tag is not None:
        try:
            ALGORITHM_MODELS[tag].model_validate({**section, "name": tag})
        except ValidationError as sub:
            return [{**se, "loc": (*loc, tag, *se["loc"])} for se in sub.errors() if tuple(se["loc"])[:1] != ("name",)]
        return []
    known = {k for m in ALGORITHM_MODELS.values() for k in m.model_fields}
    return [{"type": "unknown_algorithm_key", "loc": (*loc, k), "msg": "", "input": v}
            for k, v in section.items() if k not in known]


def _format_errors(errors: list[Any]) -> list[str]:
    problems: list[str] = []
    for e in errors:
        if e["type"] == "unknown_algorithm_key":
            problems.append(f"{_loc(tuple(e['loc']))}: unknown key (no algorithm takes it)")
            continue
        loc, _ = _walk(tuple(e["loc"]))
        where = _loc(loc)
        if e["type"] == "extra_forbidden":
            _, parent = _walk(tuple(e["loc"])[:-1])
            known = list(parent.model_fields) if parent else []
            hint = did_you_mean(str(loc[-1]), known) if known else None
            msg = f"{where}: unknown key"
            if hint:
                msg += f"; did you mean {hint!r}?"
            elif parent is not None:
                msg += f"; allowed keys: {', '.join(known)}" if known else "; this section takes no keys"
            problems.append(msg)
            continue
        if e["type"] in ("union_tag_invalid", "union_tag_not_found"):  # a bad or missing algorithm name
            expected = ", ".join(repr(a) for a in ALGORITHMS[:-1]) + f" or {ALGORITHMS[-1]!r}"
            if e["type"] == "union_tag_not_found":
                problems.append(f"{_loc((*loc, 'name'))}: Field required; give one of {expected}")
            else:
                given = e.get("ctx", {}).get("tag")
                hint = did_you_mean(str(given), list(ALGORITHMS))
                msg = f"{_loc((*loc, 'name'))}: Input should be {expected} (got {json.dumps(given, default=str)})"
                problems.append(msg + (f"; did you mean {hint!r}?" if hint else ""))
                problems += _format_errors(_errors_behind_the_tag(e, hint))
            continue
        got = e.get("input")
        got_s = json.dumps(got, default=str) if not isinstance(got, dict) else "a mapping"
        if len(got_s) > 60:
            got_s = got_s[:57] + "..."
        msg = e["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        problems.append(f"{where}: {msg} (got {got_s})")
    return problems


def check_plugin_names(config: JobConfig) -> list[str]:
    """Problems with names that plugins provide: env ids, estimators, losses, optimizers, rollout engines."""
    from tinker_core.registry import get_registry

    problems: list[str] = []
    seen: set[tuple[str, str]] = set()

    def check(kind: str, name: str | None, where: str) -> None:
        if name is None or (kind, where) in seen:
            return
        seen.add((kind, where))
        try:
            get_registry(kind).get(name)
        except UnknownNameError as e:
            problems.append(f"{where}: {e.message}")

    def where(i: int, section: str, field: str) -> str:
        # a stage's own section, or the job-level one it inherits
        if config.stages and getattr(config.stages[i], section) is not None:
            return f"stages[{i}].{section}.{field}"
        return f"{section}.{field}"

    for i, stage in enumerate(config.resolved_stages()):
        algo = "algorithm" if config.algorithm is not None else f"stages[{i}].algorithm"
        check("advantage_estimators", stage.algorithm.estimator, f"{algo}.estimator")
        check("losses", stage.algorithm.loss, f"{algo}.loss")
        multi_agent = getattr(stage.algorithm.params, "multi_agent", None)
        for role, learner in ((multi_agent.roles or {}) if multi_agent is not None else {}).items():
            check("losses", learner.loss, f"{algo}.params.multi_agent.roles.{role}.loss")
            check("optimizers", learner.optimizer, f"{algo}.params.multi_agent.roles.{role}.optimizer")
        assert stage.optimizer is not None
        check("optimizers", stage.optimizer.name, where(i, "optimizer", "name"))
        check("rollout_engines", stage.rollout.engine, where(i, "rollout", "engine"))
        if stage.env is not None and stage.env.address is None:
            check("envs", stage.env.id, where(i, "env", "id"))
            problems += _multi_agent_env_problems(stage, f"{algo}.params.multi_agent", lora=config.lora is not None)
    return problems


def _multi_agent_env_problems(stage: Any, where: str, *, lora: bool) -> list[str]:
    """``multi_agent`` of a grpo stage checked against its registered env, as the trainer checks it
    before the first rollout (:mod:`tinker_core.config.multi_agent_env`)."""
    from tinker_core.config.multi_agent import MultiAgentConfig
    from tinker_core.config.multi_agent_env import multi_agent_problems
    from tinker_core.registry import env_spec

    if not hasattr(stage.algorithm.params, "multi_agent"):
        return []
    multi_agent = stage.algorithm.params.multi_agent
    try:
        spec = env_spec(stage.env.id)
    except UnknownNameError:  # reported by the env id's check
        return []
    if spec.roles:
        return multi_agent_problems(multi_agent or MultiAgentConfig(), spec, where, lora)
    if multi_agent is not None:
        return [f"{where}: the env {spec.id!r} is single-agent (its spec has no roles); remove multi_agent or use a "
                "multi-agent env"]
    return []


def check_trackers(config: JobConfig) -> list[str]:
    """Problems with ``logging.report_to``: each listed tracker whose library is not installed here,
    naming the extra that installs it (found without importing it)."""
    from importlib.util import find_spec

    return [missing_tracker(name) for name in config.logging.report_to or () if find_spec(TRACKERS[name][0]) is None]


def missing_tracker(name: str) -> str:
    """The one line that says tracker ``name`` (a ``logging.report_to`` value) is not installed."""
    module, extra = TRACKERS[name]
    return f"logging.report_to: {name} needs the {module} package; pip install '{extra}' (or drop {name})"


def parse_config(data: Any, *, source: str | None = None, check_plugins: bool = True) -> JobConfig:
    """Validate a mapping; raise :class:`ConfigError` listing every problem found (with
    ``check_plugins``, also unknown plugin names and trackers whose library is not installed)."""
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping of sections, got {type(data).__name__}"], source)
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as e:
        problems = format_validation_error(e)
        if check_plugins:
            problems += _plugin_problems_of_raw(data)
        raise ConfigError(problems, source) from None
    if check_plugins:  # and the trackers: what this machine must have installed to run the job
        problems = check_plugin_names(config) + check_trackers(config)
        if problems:
            raise ConfigError(problems, source)
    return config


def _plugin_problems_of_raw(data: dict[str, Any]) -> list[str]:
    """Best-effort plugin-name checks on a config that failed schema validation."""
    from tinker_core.registry import get_registry

    problems: list[str] = []

    def check(kind: str, section: Any, key: str, where: str) -> None:
        name = section.get(key) if isinstance(section, dict) else None
        if not isinstance(name, str) or (kind == "envs" and section.get("address")):
            return
        try:
            get_registry(kind).get(name)
        except UnknownNameError as e:
            problems.append(f"{where}.{key}: {e.message}")

    sections = [("", data)]
    stages = data.get("stages")
    if isinstance(stages, list):
        sections += [(f"stages[{i}].", s) for i, s in enumerate(stages) if isinstance(s, dict)]
    for prefix, section in sections:  # every name a config holds, so one pass reports them all
        check("envs", section.get("env"), "id", f"{prefix}env")
        check("advantage_estimators", section.get("algorithm"), "estimator", f"{prefix}algorithm")
        check("losses", section.get("algorithm"), "loss", f"{prefix}algorithm")
        check("optimizers", section.get("optimizer"), "name", f"{prefix}optimizer")
        check("rollout_engines", section.get("rollout"), "engine", f"{prefix}rollout")
    return problems


def read_config_data(path_or_text: str | Path) -> tuple[dict[str, Any] | Any, str | None]:
    """The raw mapping of a YAML (or JSON) job config, from a file path or a YAML string, and
    its source (the path; None for a string), before any validation; a :class:`ConfigError`
    for a missing, unreadable, oversized or malformed file."""
    import yaml

    source: str | None = None
    if isinstance(path_or_text, Path) or ("\n" not in str(path_or_text) and Path(str(path_or_text)).suffix in (".yaml", ".yml", ".json")):
        path = Path(path_or_text)
        source = str(path)
        if not path.is_file():
            raise ConfigError([f"config file {path} does not exist"], source)
        try:
            check_config_size(path.stat().st_size, source)
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError([f"not UTF-8 text (byte {e.start}); a job config is a YAML or JSON text file"], source) from None
        except OSError as e:
            raise ConfigError([f"cannot read the config file: {e.strerror or e}"], source) from None
    else:
        text = str(path_or_text)
    check_config_size(len(text.encode("utf-8", errors="replace")), source)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError([f"not valid YAML: {' '.join(str(e).split())}"], source) from None
    except RecursionError:
        raise ConfigError([CONFIG_TOO_DEEP], source) from None
    if data is None:
        raise ConfigError(["the file is empty; a job needs at least 'algorithm' (or 'stages')"], source)
    check_config_shape(data, len(text), source)
    return data, source


def load_config(
    path_or_text: str | Path, *, check_plugins: bool = True, overrides: Iterable[str] = ()
) -> JobConfig:
    """Load a YAML (or JSON) job config from a file path or a YAML string.

    ``overrides``: ``key.path=value`` strings set in the parsed mapping before it is validated
    (:mod:`tinker_core.config.overrides`); a bad one raises
    :class:`~tinker_core.config.overrides.OverrideError`.
    """
    data, source = read_config_data(path_or_text)
    overrides = list(overrides)
    if overrides and isinstance(data, dict):
        data = apply_overrides(data, overrides)
    return parse_config(data, source=source, check_plugins=check_plugins)
