"""``algorithm.data`` and ``algorithm.params.eval_data``: where SFT examples and DPO pairs come from.

A plain string is a local file (``{path: STRING}``, written back as the string). A mapping (:class:`DataSource`) names one of:

* ``path`` -- a local JSONL file, a parquet file, or a folder written by ``datasets``'
  ``save_to_disk`` (a ``Dataset``, or a ``DatasetDict`` whose ``split`` is taken);
* ``hub`` -- anything ``datasets.load_dataset`` takes: a Hugging Face Hub dataset id (``HF_HUB_OFFLINE=1``
  reads it from the local cache only) or a local folder laid out like a Hub dataset repo.

``fields`` maps the names the algorithm reads (sft: ``prompt``, ``completion`` or ``messages``;
dpo: ``prompt``, ``chosen``, ``rejected``) to the dataset's columns, and ``max_rows`` bounds how
many rows are read. The reading itself lives in ``tinker_algos.hub.data_sources`` (this package
never imports ``datasets``); the model checks only what can be checked without the data.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

MAX_DATA_ROWS = 10_000_000
"""Rows a data source may hold at most (``max_rows`` bounds it further)."""


def _plain(v: str | None) -> str | None:
    if v is not None and any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError("must not hold control characters (NUL, newline, ...); give a plain name or path")
    return v


class DataSource(BaseModel):
    """A data set for sft examples or dpo pairs: a local file or folder (``path``) or a ``datasets`` id (``hub``)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    path: str | None = Field(
        None, min_length=1, max_length=4096,
        description="A local JSONL file, a parquet file, or a folder written by datasets' save_to_disk; on a scheduler, under a --model-root or the tenant's runs.",
    )
    hub: str | None = Field(
        None, min_length=1, max_length=4096,
        description="A Hugging Face datasets id (e.g. openai/gsm8k), loaded with datasets.load_dataset (HF_HUB_OFFLINE=1: from the local cache only); needs pip install 'tinker-algos[hub]'.",
    )
    config: str | None = Field(None, min_length=1, max_length=256, description="The dataset's configuration (subset) name, e.g. main for openai/gsm8k (hub only).")
    revision: str | None = Field(None, min_length=1, max_length=256, description="A branch, tag or commit of the hub dataset (hub only); None = its default branch.")
    split: str | None = Field(
        None, min_length=1, max_length=256,
        description="The split to read (train, test...); None = the only split, else 'train'. A JSONL or parquet file is one split.",
    )
    fields: dict[str, str] = Field(
        default_factory=dict,
        description="What the algorithm reads -> the dataset's column, e.g. {prompt: question, completion: answer} (sft) or {chosen: good, rejected: bad} (dpo); unnamed fields keep their own names.",
    )
    max_rows: int | None = Field(
        None, ge=1, le=MAX_DATA_ROWS,
        description=f"Read the first N rows only; None = every row (a source of more than {MAX_DATA_ROWS:,} rows is refused).",
    )

    _plain_names = field_validator("path", "hub", "config", "revision", "split")(_plain)

    @model_validator(mode="after")
    def _one_source(self) -> DataSource:
        if (self.path is None) == (self.hub is None):
            raise ValueError("give exactly one of path (a local JSONL, parquet or save_to_disk folder) and hub (a datasets id)")
        if self.path is not None and (self.config is not None or self.revision is not None):
            raise ValueError("config and revision name a hub dataset's subset and version; remove them for a local path (or use hub)")
        for key, column in self.fields.items():
            if not key or not column:
                raise ValueError(f"fields {{{key!r}: {column!r}}}: map a field name to a column name, neither empty")
        return self

    @model_serializer(mode="wrap")
    def _shorthand(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A source that is only a path is written back as its string form, as it was given."""
        if self.path is not None and not self.model_fields_set - {"path"}:
            return self.path
        return handler(self)

    def describe(self) -> str:
        """A short name for messages: the path or id, with the split when given."""
        name = self.path if self.path is not None else self.hub
        return f"{name}[{self.split}]" if self.split else str(name)


def check_data_shorthand(v: object) -> object:
    """A data field before validation: its string form (a local path, 1 to 4096 characters, no
    control characters) becomes ``{path: ...}``; a mapping passes on to :class:`DataSource`."""
    if v is None or isinstance(v, (dict, DataSource)):
        return v
    if not isinstance(v, str):
        raise ValueError("give a path string or a mapping with path or hub (and split, fields, max_rows)")
    if not 1 <= len(v) <= 4096:
        raise ValueError("a data path must be 1 to 4096 characters long")
    return {"path": _plain(v)}


def data_path(data: DataSource | None) -> str | None:
    """The local path ``data`` reads from, or None (no data, or a hub id)."""
    return None if data is None else data.path


__all__ = ["MAX_DATA_ROWS", "DataSource", "check_data_shorthand", "data_path"]
