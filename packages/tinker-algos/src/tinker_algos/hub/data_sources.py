"""Reading ``algorithm.data`` (a :class:`tinker_core.config.DataSource`): the records SFT and DPO train on.

:func:`read_records` gives ``(label, record)`` pairs -- ``label`` says where the record is
(``file.jsonl:3``, ``data.parquet row 2``), for the algorithm's own errors -- from:

* a **JSONL** file (no extra dependency), one JSON value a line;
* a **parquet** file (``pyarrow``), read a batch at a time up to the row bound;
* a folder written by ``datasets``' ``save_to_disk`` (a ``Dataset``, or a ``DatasetDict`` whose
  ``split`` is taken);
* a **hub** source: ``datasets.load_dataset(hub, config, split=..., revision=...)`` -- a Hub id
  (``HF_HUB_OFFLINE=1`` reads the local cache only) or a folder laid out like a Hub dataset repo.

``fields`` renames columns to the names the algorithm reads; a name the algorithm does not read, a
column the data lacks, or a split it does not have is a :class:`ConfigError` naming the config field,
what the data has, and the fix. At most ``max_rows`` rows are read (else :data:`MAX_DATA_ROWS`, over
which a source is refused). ``datasets`` and ``pyarrow`` come with ``pip install 'tinker-algos[hub]'``
and are imported only for the sources that need them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tinker_core.config import MAX_DATA_ROWS, DataSource
from tinker_core.errors import ConfigError, did_you_mean

Record = tuple[str, Any]
"""``(label, record)``: where a record is (for errors), and the record with ``fields`` applied."""

HUB_EXTRA = "pip install 'tinker-algos[hub]'"
DISK_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")


def as_source(data: DataSource | str | Path) -> DataSource:
    """``data`` as a :class:`DataSource` (a string or path is a local file)."""
    return data if isinstance(data, DataSource) else DataSource(path=str(data))


def read_records(data: DataSource | str | Path, where: str, what: str, names: Sequence[Sequence[str]]) -> list[Record]:
    """The records of ``data`` with its ``fields`` mapping applied.

    ``where``: the config field, for errors; ``what``: what the data should hold, for a missing
    file; ``names``: the field sets the algorithm reads, one of which each record needs (sft:
    ``[("prompt", "completion"), ("messages",)]``) -- a ``fields`` key outside them is an error,
    and a tabular source (parquet, datasets) must have the columns of one of them.
    """
    source = as_source(data)
    known = sorted({n for group in names for n in group})
    for key in source.fields:
        if key not in known:
            hint = did_you_mean(key, known)
            raise ConfigError([f"{where}.fields: {key!r} is not a field this algorithm reads"
                               + (f"; did you mean {hint!r}?" if hint else f" (it reads {', '.join(known)})")])
    limit = source.max_rows or MAX_DATA_ROWS
    if source.hub is not None:
        columns, rows = _hub_rows(source, where, limit)
        return _tabular(source, where, columns, rows, names)
    p = Path(str(source.path)).expanduser()
    if p.is_dir():
        columns, rows = _disk_rows(source, p, where, limit)
        return _tabular(source, where, columns, rows, names)
    if p.suffix == ".parquet" and p.is_file():
        if source.split is not None:
            raise ConfigError([f"{where}.split: {p} is one parquet file, one split; remove split (or give a save_to_disk folder)"])
        columns, rows = _parquet_rows(p, where, limit)
        return _tabular(source, where, columns, rows, names)
    if source.split is not None and p.is_file():
        raise ConfigError([f"{where}.split: {p} is one JSONL file, one split; remove split (or give a save_to_disk folder)"])
    records = read_jsonl(p, where, what, limit)
    return [(label, _renamed(rec, source.fields, where, label)) for label, rec in records]


def read_jsonl(path: str | Path, where: str, what: str, limit: int = MAX_DATA_ROWS) -> list[Record]:
    """``("FILE:LINE", record)`` of the first ``limit`` non-blank lines of a JSONL file.

    Errors name ``where`` (the config field), the file and the line; ``what`` says what the file
    should hold, for a missing file.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError([f"{where}: file {p} does not exist; give a JSONL file of {what}, a parquet file, "
                           "a save_to_disk folder, or {hub: DATASET_ID}"])
    records: list[Record] = []
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if len(records) == limit:
                if limit == MAX_DATA_ROWS:
                    raise ConfigError([f"{where}: {p} holds more than {MAX_DATA_ROWS:,} records; set max_rows to read the first ones"])
                break
            try:
                records.append((f"{p}:{n}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise ConfigError([f"{where}: {p}:{n} is not JSON ({e.msg} at column {e.colno})"]) from None
    if not records:
        raise ConfigError([f"{where}: {p} holds no records"])
    return records


def _renamed(rec: Any, fields: dict[str, str], where: str, label: str) -> Any:
    if not fields or not isinstance(rec, dict):
        return rec
    missing = [c for c in fields.values() if c not in rec]
    if missing:
        raise ConfigError([f"{where}.fields: {label} has no field {missing[0]!r} (its fields: {', '.join(map(str, rec))})"])
    out = {k: v for k, v in rec.items() if k not in fields}
    out.update({key: rec[column] for key, column in fields.items()})
    return out


def _tabular(source: DataSource, where: str, columns: Sequence[str], rows: Iterable[dict[str, Any]], names: Sequence[Sequence[str]]) -> list[Record]:
    """Rows of a table, renamed, after checking its columns hold one of ``names``."""
    listed = ", ".join(columns)
    for key, column in source.fields.items():
        if column not in columns:
            hint = did_you_mean(column, list(columns))
            raise ConfigError([f"{where}.fields.{key}: {source.describe()} has no column {column!r}"
                               + (f"; did you mean {hint!r}?" if hint else "") + f" (its columns: {listed})"])
    mapped = {key for key in source.fields} | {c for c in columns if c not in source.fields.values()}
    if not any(set(group) <= mapped for group in names):
        want = " or ".join("+".join(group) for group in names)
        example = ", ".join(f"{n}: COLUMN" for n in names[0])
        raise ConfigError([f"{where}: {source.describe()} has no columns {want} (its columns: {listed}); "
                           f"map them with fields, e.g. fields: {{{example}}}"])
    out = [(f"{source.describe()} row {i}", _renamed(row, source.fields, where, f"row {i}")) for i, row in enumerate(rows)]
    if not out:
        raise ConfigError([f"{where}: {source.describe()} holds no rows"])
    return out


def _need(module: str, where: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError([f"{where}: reading {what} needs the {module.split('.')[0]} library; {HUB_EXTRA}"]) from None


def _parquet_rows(p: Path, where: str, limit: int) -> tuple[list[str], list[dict[str, Any]]]:
    pq = _need("pyarrow.parquet", where, "a parquet file")
    try:
        f = pq.ParquetFile(p)
    except Exception as e:  # pyarrow raises its own ArrowInvalid for a file that is not parquet
        raise ConfigError([f"{where}: {p} is not a parquet file ({_first_line(e)})"]) from None
    _check_size(f.metadata.num_rows, limit, where, str(p))
    rows: list[dict[str, Any]] = []
    for batch in f.iter_batches(batch_size=min(limit, 65_536)):
        rows.extend(batch.to_pylist()[: limit - len(rows)])
        if len(rows) >= limit:
            break
    return list(f.schema_arrow.names), rows


def _disk_rows(source: DataSource, p: Path, where: str, limit: int) -> tuple[list[str], list[dict[str, Any]]]:
    if not any((p / m).is_file() for m in DISK_MARKERS):
        raise ConfigError([f"{where}.path: {p} is a folder but not one written by datasets' save_to_disk (no {' or '.join(DISK_MARKERS[::2])}); "
                           f"for a folder laid out like a Hub dataset repo write hub: {p}"])
    datasets = _need("datasets", where, "a save_to_disk folder")
    try:
        loaded = datasets.load_from_disk(str(p))
    except (OSError, ValueError) as e:
        raise ConfigError([f"{where}.path: datasets could not load {p} ({_first_line(e)})"]) from None
    return _rows_of(loaded, source, where, limit)


def _hub_rows(source: DataSource, where: str, limit: int) -> tuple[list[str], list[dict[str, Any]]]:
    datasets = _need("datasets", where, "a hub dataset")
    hub = str(source.hub)
    try:
        loaded = datasets.load_dataset(hub, source.config, split=source.split, revision=source.revision)
    except ValueError as e:
        text = _first_line(e)
        if source.split is not None and "split" in text.lower():
            raise ConfigError([f"{where}.split: {source.describe()}: {text}; set split to one of them"]) from None
        if "config" in text.lower():
            raise ConfigError([f"{where}.config: {text}"]) from None
        raise ConfigError([f"{where}.hub: datasets could not load {hub!r} ({text})"]) from None
    except Exception as e:  # DatasetNotFoundError, ConnectionError, FileNotFoundError (offline, not cached)...
        raise ConfigError([f"{where}.hub: datasets could not load {hub!r} ({type(e).__name__}: {_first_line(e)}); "
                           "check the id (and config); with HF_HUB_OFFLINE=1 only datasets already in the local cache load"]) from None
    return _rows_of(loaded, source, where, limit)


def _rows_of(loaded: Any, source: DataSource, where: str, limit: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The columns and first ``limit`` rows of a ``Dataset``, or of the ``split`` of a ``DatasetDict``."""
    if hasattr(loaded, "keys"):  # a DatasetDict: pick the split
        splits = list(loaded.keys())
        split = source.split or (splits[0] if len(splits) == 1 else "train" if "train" in splits else None)
        if split is None or split not in splits:
            hint = did_you_mean(split, splits) if split else None
            what = f"has no split {split!r}" if split else "holds several splits"
            raise ConfigError([f"{where}.split: {source.describe()} {what}" + (f"; did you mean {hint!r}?" if hint else "")
                               + f" (its splits: {', '.join(splits)}); set split to one of them"])
        loaded = loaded[split]
    elif source.split is not None and str(getattr(loaded, "split", None) or "") != source.split:
        raise ConfigError([f"{where}.split: {source.describe()} is one dataset without splits; remove split"])
    _check_size(len(loaded), limit, where, source.describe())
    part = loaded.select(range(min(limit, len(loaded))))
    return list(loaded.column_names), part.to_list()


def _check_size(rows: int, limit: int, where: str, name: str) -> None:
    if limit == MAX_DATA_ROWS and rows > MAX_DATA_ROWS:
        raise ConfigError([f"{where}: {name} holds {rows:,} rows, more than {MAX_DATA_ROWS:,}; set max_rows to read the first ones"])


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


__all__ = ["HUB_EXTRA", "Record", "as_source", "read_jsonl", "read_records"]
