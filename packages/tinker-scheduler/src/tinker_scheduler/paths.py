"""Which server paths a tenant's jobs and training sessions may use: :class:`PathPolicy`.

A job writes only under ``runs_dir/<tenant>/<job id>/`` and a session under
``runs_dir/<tenant>/sessions/``. What a tenant may name as a base model (``model.name``,
``model.tokenizer``, CreateSession's ``base_model``):

- a preset: ``tiny`` or ``tiny:SEED``;
- a Hugging Face hub id (``org/name`` or ``name``) that is not also a path on the server;
- a directory under one of the scheduler's ``--model-root`` roots;
- the tenant's own run outputs (under ``runs_dir/<tenant>/``).

A data file (``algorithm.data``, ``algorithm.params.eval_data``; a data source's ``path``, or its
``hub`` when that is a path here rather than a hub id) must lie under a model root or
the tenant's own run outputs, and so must every path in the env's arguments (``env.kwargs``,
``env.eval_kwargs``, a stage's ``env``; e.g. ``math/dataset-v0``'s ``path``): a string whose key
names a path (:data:`PATH_KEY_RE`: ``path``, ``file``, ``data_dir``, ``eval_files``, ...) or that
looks like one whatever its key (it starts with ``/``, ``~``, ``./``, ``../`` or ``file:``), in
nested mappings and lists too; a URL of another scheme is not a server path. Paths are resolved (``..`` and symbolic links followed) before they
are checked, and whatever lies in the runs directory of another tenant is refused even when a
model root contains it. A refusal is one message that is the same whether the path exists or not,
so it tells the caller nothing about the server's files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tinker_core.config import DataSource, JobConfig
from tinker_core.names import is_hub_id
from tinker_scheduler.errors import StatusError

PRESET_RE = re.compile(r"tiny(:[0-9]{1,19})?")
"""The built-in presets (``tinker_algos.model.model_files.resolve_model``): ``tiny`` and ``tiny:SEED``."""
_TENANT_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
PATH_KEY_RE = re.compile(r"(.*_)?(path|file|filename|dir|directory|root|folder)s?", re.IGNORECASE)
"""Env argument names whose string values are server paths (``path``, ``eval_file``, ``data_dirs``...)."""
_PATH_VALUE_RE = re.compile(r"(/|~[A-Za-z0-9_.-]*(/|$)|\.\.?(/|\\|$)|file:)", re.IGNORECASE)
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class PathPolicy:
    """The path rules of one scheduler: its runs directory and its model roots.

    Every check raises :class:`~tinker_scheduler.errors.StatusError` (``PERMISSION_DENIED`` for a
    forbidden path, ``INVALID_ARGUMENT`` for a malformed one) with a one-line message that names
    the field.
    """

    def __init__(self, runs_dir: Path | str, model_roots: Iterable[Path | str] = ()) -> None:
        self.runs_dir = Path(os.path.realpath(runs_dir))
        self.model_roots: tuple[Path, ...] = tuple(Path(os.path.realpath(r)) for r in model_roots)

    # ---- where a tenant writes ------------------------------------------------------------

    def tenant_dir(self, tenant: str) -> Path:
        """``runs_dir/<tenant>``, checked to lie inside the runs directory."""
        path = Path(os.path.realpath(self.runs_dir / tenant))
        if not _TENANT_RE.fullmatch(tenant) or path.parent != self.runs_dir:
            raise StatusError("INVALID_ARGUMENT", f"tenant {tenant!r} cannot name a directory under the runs directory")
        return path

    def run_dir(self, tenant: str, job_id: str) -> Path:
        """``runs_dir/<tenant>/<job id>``, checked to lie inside the tenant's directory."""
        root = self.tenant_dir(tenant)
        path = Path(os.path.realpath(root / job_id))
        if path.parent != root:
            raise StatusError("INVALID_ARGUMENT", f"job id {job_id!r} cannot name a directory under the runs directory")
        return path

    # ---- what a tenant reads --------------------------------------------------------------

    def _readable(self, path: str, tenant: str) -> bool:
        try:
            real = Path(os.path.realpath(Path(path).expanduser()))
        except RuntimeError:  # '~name' of a user this server does not have
            return False
        if _inside(real, self.runs_dir):
            return _inside(real, self.tenant_dir(tenant))
        return any(_inside(real, root) for root in self.model_roots)

    def _roots_text(self) -> str:
        return ", ".join(str(r) for r in self.model_roots) if self.model_roots else "this scheduler has none"

    def check_model(self, name: str, tenant: str, field: str = "model.name") -> None:
        """Refuse a base model ``name`` that is not a preset, a hub id, or an allowed directory."""
        if "\x00" in name or not name.strip():
            raise StatusError("INVALID_ARGUMENT", f"{field}: give a preset ('tiny'), a hub id ('org/name') or a directory")
        if PRESET_RE.fullmatch(name):
            return
        if is_hub_id(name) and not os.path.lexists(name):
            return  # loaded from the hub (a name that is also a path here is a path)
        if not self._readable(name, tenant):
            raise StatusError(
                "PERMISSION_DENIED",
                f"{field}: {name!r} is not a base model this scheduler allows; use a preset ('tiny'), a hub id "
                f"('org/name'), a directory under a --model-root ({self._roots_text()}) or your own run outputs",
            )

    def check_data(self, path: str, tenant: str, field: str = "algorithm.data") -> None:
        """Refuse a data file outside the model roots and the tenant's own run outputs."""
        if "\x00" in path or not self._readable(path, tenant):
            raise StatusError(
                "PERMISSION_DENIED",
                f"{field}: {path!r} is not a file this scheduler lets jobs read; put it under a --model-root "
                f"({self._roots_text()}) or your own run outputs",
            )

    def check_data_source(self, source: DataSource, tenant: str, field: str) -> None:
        """Refuse a data source that reads outside what :meth:`check_data` allows: its ``path``, or a
        ``hub`` value that is a path on this server (``datasets.load_dataset`` reads local folders);
        a hub id that is no path here is downloaded like a hub model (``datasets`` runs no code)."""
        if source.path is not None:
            self.check_data(source.path, tenant, field)
        elif source.hub is not None and not (is_hub_id(source.hub) and not os.path.lexists(source.hub)):
            self.check_data(source.hub, tenant, f"{field}.hub")

    def check_env_args(self, value: Any, tenant: str, field: str, *, path_key: bool = False) -> None:
        """Refuse a path in env arguments ``value`` (``field``: e.g. ``env.kwargs``) outside what
        :meth:`check_data` allows; see the module docstring for what counts as a path."""
        if isinstance(value, Mapping):
            for key, item in value.items():
                named = isinstance(key, str) and PATH_KEY_RE.fullmatch(key) is not None
                self.check_env_args(item, tenant, f"{field}.{key}", path_key=named)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                self.check_env_args(item, tenant, f"{field}[{i}]", path_key=path_key)
        elif isinstance(value, str) and (path_key or _PATH_VALUE_RE.match(value)):
            if _URL_RE.match(value) and not value.lower().startswith("file:"):
                return  # a URL, not a path on this server
            self.check_data(value, tenant, field)

    def check_job(self, config: JobConfig, tenant: str) -> None:
        """Check every path a job config names: the model, the tokenizer, each stage's data files
        and the paths in its env arguments."""
        self.check_model(config.model.name, tenant, "model.name")
        if config.model.tokenizer is not None:
            self.check_model(config.model.tokenizer, tenant, "model.tokenizer")
        if config.model.chat_template not in ("auto", "tokenizer", "none"):  # a template file
            self.check_data(config.model.chat_template, tenant, "model.chat_template")
        for i, stage in enumerate(config.resolved_stages()):
            where = "algorithm" if config.algorithm is not None else f"stages[{i}].algorithm"
            if stage.algorithm.data is not None:
                self.check_data_source(stage.algorithm.data, tenant, f"{where}.data")
            eval_data = getattr(stage.algorithm.params, "eval_data", None)
            if eval_data is not None:
                self.check_data_source(eval_data, tenant, f"{where}.params.eval_data")
        envs = [("env", config.env)] + [(f"stages[{i}].env", s.env) for i, s in enumerate(config.stages)]
        for where, env in envs:
            if env is not None:
                self.check_env_args(env.kwargs, tenant, f"{where}.kwargs")
                self.check_env_args(env.eval_kwargs or {}, tenant, f"{where}.eval_kwargs")

