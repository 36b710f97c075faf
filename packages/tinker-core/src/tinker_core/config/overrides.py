"""Command-line overrides of a job config: ``key.path=value`` strings applied to the raw mapping.

``opentinker train FILE optimizer.lr=3e-4 stages.1.algorithm.estimator=rloo`` reads FILE, sets
each path in the parsed YAML mapping, then validates the result as usual, so an override is
exactly an edit of the file. The rules:

* the path is dotted; a part made of digits indexes a list (``stages.1.algorithm.lr``);
* the value is parsed as YAML: ``3``, ``0.5``, ``1e-3``, ``true``, ``null``, ``[a, b]``,
  ``{k: v}``, anything else a string (quote it, ``name='007'``, to keep a number a string);
* every part must name a key of the pydantic model at that place (the ``algorithm`` section's
  keys are those of the algorithm its ``name`` selects); below a free mapping such as
  ``env.kwargs``, ``algorithm.params.estimator_config``, ``algorithm.loss_config`` or
  ``optimizer.params`` any key is allowed. An unknown key is an :class:`OverrideError` naming
  the path, with a did-you-mean on the closest valid key;
* a missing section is created (``lora.rank=4`` on a config without ``lora``); a list index
  must exist (``stages.5`` of a two-stage job is an error).

Overrides apply in order; a later one sees what an earlier one set (``algorithm.name=ppo
algorithm.params.critic=separate`` works).
"""

from __future__ import annotations

import copy
import re
import types
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from tinker_core.config.models import JobConfig, models_in
from tinker_core.errors import OpenTinkerError, did_you_mean

PathPart = str | int
_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


class OverrideError(OpenTinkerError, ValueError):
    """A ``key.path=value`` override that cannot apply; the message is one line naming it."""


@dataclass(frozen=True)
class Override:
    """One parsed override: the path's parts (ints index lists), the value, and the text given."""

    path: tuple[PathPart, ...]
    value: Any
    text: str

    @property
    def dotted(self) -> str:
        return dotted(self.path)


def dotted(path: Iterable[PathPart]) -> str:
    """A path as written on the command line: ``stages.1.algorithm.lr``."""
    return ".".join(str(p) for p in path)


def parse_path(key: str, *, text: str | None = None) -> tuple[PathPart, ...]:
    """``"stages.1.algorithm.lr"`` -> ``("stages", 1, "algorithm", "lr")``."""
    parts = key.strip().split(".")
    if not key.strip() or any(not p for p in parts):
        raise OverrideError(f"override {text or key!r}: the key path has an empty part; write it as section.key=value (e.g. optimizer.lr=0.001)")
    return tuple(int(p) if p.isdigit() else p for p in parts)


def parse_value(raw: str, *, text: str | None = None) -> Any:
    """A value as YAML: numbers, booleans, null, lists and mappings; else the string itself."""
    import yaml

    if raw == "":
        raise OverrideError(f"override {text!r}: no value after '='; write null for none, '' for an empty string")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise OverrideError(f"override {text!r}: the value is not valid YAML ({' '.join(str(e).split())}); quote it") from None
    if isinstance(value, str) and raw.strip() == value and _EXPONENT.fullmatch(value):
        return float(value)  # YAML 1.1 reads 1e-3 as a string; on a command line it is a number
    return value


def parse_override(text: str) -> Override:
    """Parse one ``key.path=value`` string (see the module docstring)."""
    if "=" not in text:
        raise OverrideError(f"override {text!r}: expected key.path=value (e.g. optimizer.lr=0.001)")
    key, raw = text.split("=", 1)
    return Override(parse_path(key, text=text), parse_value(raw, text=text), text)


def parse_overrides(texts: Iterable[str]) -> list[Override]:
    return [parse_override(t) for t in texts]


# ---- the schema walk ------------------------------------------------------------------------

Kind = Literal["model", "list", "free", "value"]


def _kind(annotation: Any) -> tuple[Kind, Any]:
    """What a field holds: ``("model", [models])``, ``("list", item annotation)``,
    ``("free", None)`` (a mapping with any keys) or ``("value", None)``."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _kind(args[0])
        models = models_in(annotation)
        return ("model", models) if models and len(models) == len(args) else ("value", None)
    if origin is list:
        (item,) = get_args(annotation) or (Any,)
        return "list", item
    if origin is dict or annotation is dict:
        return "free", None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", [annotation]
    models = models_in(annotation)  # Annotated[...]
    if models:
        return "model", models
    return "value", None


def _fields_of(models: list[type[BaseModel]], node: Any) -> dict[str, Any]:
    """The fields at a section of ``models`` (a discriminated union picks the model that the
    section's ``name`` selects; without a name, the keys of any of them)."""
    if len(models) > 1 and isinstance(node, dict):
        for m in models:
            name = m.model_fields.get("name")
            if name is not None and get_origin(name.annotation) is Literal and node.get("name") in get_args(name.annotation):
                return dict(m.model_fields)
    fields: dict[str, Any] = {}
    for m in models:
        for k, f in m.model_fields.items():
            fields.setdefault(k, f)
    return fields


def _check(data: dict[str, Any], ov: Override) -> None:
    """Raise :class:`OverrideError` unless every part of ``ov.path`` is a place in the schema
    (and, for list indexes, in ``data``)."""
    kind: Kind = "model"
    spec: Any = [JobConfig]
    node: Any = data
    for i, part in enumerate(ov.path):
        here = dotted(ov.path[: i + 1])
        if kind == "free":
            return
        if kind == "value":
            raise OverrideError(f"override {ov.text!r}: {dotted(ov.path[:i])} is a value, not a section; it has no key {part!r}")
        if kind == "list":
            if not isinstance(part, int):
                raise OverrideError(f"override {ov.text!r}: {dotted(ov.path[:i])} is a list; index it with a number ({dotted(ov.path[:i])}.0)")
            length = len(node) if isinstance(node, list) else 0
            if part >= length:
                raise OverrideError(f"override {ov.text!r}: {dotted(ov.path[:i])} has {length} item(s); index {part} is out of range")
            kind, spec = _kind(spec)
            node = node[part]
            continue
        fields = _fields_of(spec, node)
        if not isinstance(part, str) or part not in fields:
            hint = did_you_mean(str(part), fields)
            fix = f"did you mean {dotted((*ov.path[:i], hint))!r}?" if hint else f"keys there: {', '.join(fields)}"
            raise OverrideError(f"override {ov.text!r}: unknown key {here}; {fix}")
        kind, spec = _kind(fields[part].annotation)
        node = node.get(part) if isinstance(node, dict) else None


def _set(data: dict[str, Any], ov: Override) -> None:
    node: Any = data
    for i, part in enumerate(ov.path[:-1]):
        nxt = node[part] if isinstance(node, list) else node.get(part)
        if nxt is None:  # a missing section (the schema walk said it is one): create it
            nxt = node[part] = {}
        if not isinstance(nxt, dict | list):
            raise OverrideError(f"override {ov.text!r}: {dotted(ov.path[: i + 1])} holds a {type(nxt).__name__} value, not a section")
        node = nxt
    node[ov.path[-1]] = copy.deepcopy(ov.value)


def apply_overrides(data: dict[str, Any], overrides: Iterable[str | Override]) -> dict[str, Any]:
    """A copy of the raw config mapping ``data`` with each override set, in order (``data`` is
    not changed). Raises :class:`OverrideError` (one line) for a malformed override or a path
    that is not in the schema; the values themselves are checked when the result is validated."""
    out = copy.deepcopy(data)
    for item in overrides:
        ov = item if isinstance(item, Override) else parse_override(item)
        _check(out, ov)
        _set(out, ov)
    return out


def get_path(data: Any, path: Iterable[PathPart]) -> tuple[bool, Any]:
    """``(True, value)`` at ``path`` in a raw mapping, ``(False, None)`` where it is not set."""
    node = data
    for part in path:
        in_dict = isinstance(node, dict) and part in node
        if in_dict or (isinstance(node, list) and isinstance(part, int) and part < len(node)):
            node = node[part]
        else:
            return False, None
    return True, node
