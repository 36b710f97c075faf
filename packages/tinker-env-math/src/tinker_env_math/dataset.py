"""``math/dataset-v0``: word problems from a file of ``{"question", "answer"}`` records.

Records follow the GSM8K convention: ``answer`` is a worked solution whose last line is
``#### <number>`` (an answer that is just a number is accepted too). Files:

- ``.jsonl`` (one JSON object a line) and ``.json`` (a JSON array, or JSON lines): read with
  the standard library;
- ``.parquet``: read with Hugging Face ``datasets`` when it is installed, else with
  ``pyarrow``; with neither, a clear error says what to install.

``backend="datasets"`` forces ``datasets`` for any of these formats. The default ``path`` is
the sample shipped with this package (:data:`SAMPLE_DATASET_PATH`, made by
:mod:`tinker_env_math.sample_data`).

Episode: the observation is ``prompt_template.format(question=...)`` (default
``"Question: {question}\\nAnswer:"``); the action is a worked solution ending in
``#### <number>`` (``\\boxed{}``, ``The answer is N`` and a bare number are accepted, and
otherwise the last number in the text is taken). Reward 1 when the number equals the gold
answer, ``format_reward`` for a wrong answer in an explicit form, else 0.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tinker_core import EnvSpec, TextEnv
from tinker_env_math.parsing import extract_gsm8k_answer, parse_answer

__all__ = [
    "DATASET_SPEC",
    "SAMPLE_DATASET_PATH",
    "DatasetEnv",
    "MathRecord",
    "load_math_dataset",
]

SAMPLE_DATASET_PATH = Path(__file__).parent / "data" / "gsm8k_sample.jsonl"
"""The sample shipped in the package (installed with it as package data)."""

DEFAULT_PROMPT_TEMPLATE = "Question: {question}\nAnswer:"
Backend = Literal["auto", "datasets", "plain"]

DATASET_SPEC = EnvSpec(
    id="math/dataset-v0",
    description=(
        "Math word problems from a JSONL/parquet file of GSM8K-style {question, answer} "
        "records (the package ships a small sample). Reward 1 for the right final number."
    ),
    max_turns=1,
    reward_range=(0.0, 1.0),
    action_format="a worked solution whose last line is '#### <number>'",
    metadata={
        "kwargs": {
            "path": "JSONL/JSON/parquet file (default: the bundled sample)",
            "prompt_template": "format string with {question} (default 'Question: {question}\\nAnswer:')",
            "backend": "'auto' (default) | 'datasets' | 'plain'",
            "format_reward": "reward for a wrong answer in an explicit form, in [0, 1) (default 0)",
        }
    },
)


@dataclass(frozen=True)
class MathRecord:
    """One problem: the question, the full solution text and its gold number (normalised)."""

    question: str
    solution: str
    answer: str


def _rows_plain(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        rows = json.loads(text)
        if not isinstance(rows, list):  # pragma: no cover - guarded by the startswith
            raise ValueError(f"{path}: a .json dataset must be an array of objects")
        return rows
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{path}:{lineno}: not valid JSON ({e.msg}); expected one object a line"
            ) from None
    return rows


def _rows_datasets(path: Path) -> list[Any]:
    import datasets

    loader = (
        datasets.Dataset.from_parquet if path.suffix == ".parquet" else datasets.Dataset.from_json
    )
    return list(loader(str(path)))


def _rows_pyarrow(path: Path) -> list[Any]:
    import pyarrow.parquet as pq

    return list(pq.read_table(path).to_pylist())


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def load_math_dataset(
    path: str | Path | None = None, *, backend: Backend = "auto"
) -> list[MathRecord]:
    """Read and validate a dataset file; errors name the file, the record and the fix."""
    path = Path(path) if path is not None else SAMPLE_DATASET_PATH
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset path {str(path)!r} is not a file; pass path= a .jsonl, .json or .parquet file"
        )
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".json", ".parquet"):
        raise ValueError(
            f"dataset path {str(path)!r}: unsupported extension {suffix!r}; use .jsonl, .json or .parquet"
        )
    if backend not in ("auto", "datasets", "plain"):
        raise ValueError(f"backend must be 'auto', 'datasets' or 'plain', got {backend!r}")
    if backend == "datasets" or (backend == "auto" and suffix == ".parquet" and _has("datasets")):
        if not _has("datasets"):
            raise ImportError(
                "backend='datasets' needs Hugging Face datasets: pip install datasets"
            )
        rows = _rows_datasets(path)
    elif suffix == ".parquet":
        if not _has("pyarrow"):
            raise ImportError(
                f"reading {str(path)!r} needs Hugging Face datasets or pyarrow: "
                "pip install pyarrow (or datasets), or convert the file to .jsonl"
            )
        rows = _rows_pyarrow(path)
    else:
        rows = _rows_plain(path)
    records = []
    for i, row in enumerate(rows):
        where = f"{path} record {i}"
        if not isinstance(row, dict):
            raise ValueError(
                f"{where}: expected an object with 'question' and 'answer', got {type(row).__name__}"
            )
        missing = [k for k in ("question", "answer") if not isinstance(row.get(k), str)]
        if missing:
            raise ValueError(
                f"{where}: missing or non-string field(s) {missing}; each record needs 'question' and 'answer' strings"
            )
        gold = extract_gsm8k_answer(row["answer"])
        if gold is None:
            raise ValueError(
                f"{where}: the answer has no final '#### <number>' line (GSM8K convention)"
            )
        records.append(MathRecord(row["question"], row["answer"], gold))
    if not records:
        raise ValueError(f"dataset {str(path)!r} has no records")
    return records


@functools.lru_cache(maxsize=8)
def _load_cached(path: Path, mtime_ns: int, size: int, backend: Backend) -> tuple[MathRecord, ...]:
    return tuple(load_math_dataset(path, backend=backend))


def _records(path: str | Path | None, backend: Backend) -> tuple[MathRecord, ...]:
    """Cached :func:`load_math_dataset` (keyed on the file's path, mtime and size)."""
    p = Path(path) if path is not None else SAMPLE_DATASET_PATH
    if not p.is_file():
        load_math_dataset(p, backend=backend)  # raises the explanatory error
    st = p.stat()
    return _load_cached(p.resolve(), st.st_mtime_ns, st.st_size, backend)


class DatasetEnv(TextEnv):
    """Single-turn word problems from a dataset file; see the module docstring.

    Args:
        path: ``.jsonl``/``.json``/``.parquet`` file; default the bundled sample.
        prompt_template: format string with a ``{question}`` field.
        backend: ``"auto"``, ``"datasets"`` or ``"plain"`` (see :func:`load_math_dataset`).
        format_reward: reward for a wrong answer in an explicit form, in ``[0, 1)``.
    """

    env_spec = DATASET_SPEC

    def __init__(
        self,
        path: str | Path | None = None,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        backend: Backend = "auto",
        format_reward: float = 0.0,
    ) -> None:
        if "{question}" not in prompt_template:
            raise ValueError(
                f"prompt_template must contain '{{question}}', got {prompt_template!r}"
            )
        if not 0.0 <= format_reward < 1.0:
            raise ValueError(f"format_reward must be in [0, 1), got {format_reward}")
        self.records = _records(path, backend)
        self.prompt_template = prompt_template
        self.format_reward = float(format_reward)
        self.record: MathRecord | None = None
        self.index = -1
        self._done = True

    def __len__(self) -> int:
        return len(self.records)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw a record with the seeded RNG; ``options={"index": i}`` picks record ``i``."""
        super().reset(seed=seed)
        if options and "index" in options:
            index = int(options["index"])
            if not 0 <= index < len(self.records):
                raise IndexError(
                    f"options['index'] must be in 0..{len(self.records) - 1}, got {index}"
                )
        else:
            index = int(self.np_random.integers(len(self.records)))
        self.index = index
        self.record = self.records[index]
        self._done = False
        obs = self.prompt_template.format(question=self.record.question)
        return obs, {"index": index, "answer": self.record.answer, "solution": self.record.solution}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.record is None or self._done:
            raise RuntimeError("DatasetEnv.step: the episode is over or not started; call reset()")
        if not isinstance(action, str):
            raise TypeError(f"DatasetEnv.step: action must be a str, got {type(action).__name__}")
        self._done = True
        parsed = parse_answer(action)
        correct = parsed is not None and parsed == self.record.answer
        if correct:
            reward = 1.0
        elif parse_answer(action, fallback_last_number=False) is not None:
            reward = self.format_reward
        else:
            reward = 0.0
        return (
            "",
            reward,
            True,
            False,
            {
                "index": self.index,
                "answer": self.record.answer,
                "parsed": parsed,
                "correct": correct,
            },
        )

    def render(self) -> str | None:
        return self.record.question if self.record else None
