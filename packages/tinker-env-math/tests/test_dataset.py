"""math/dataset-v0: the bundled sample, file formats, validation and scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinker_env_math import dataset as dataset_mod
from tinker_env_math.dataset import SAMPLE_DATASET_PATH, DatasetEnv, load_math_dataset
from tinker_env_math.parsing import extract_gsm8k_answer
from tinker_env_math.sample_data import generate_records, main, write_jsonl

RECORDS = [
    {"question": "What is 2 plus 3?", "answer": "2 + 3 = <<2+3=5>>5\n#### 5"},
    {"question": "What is 10 minus 4?", "answer": "10 - 4 = <<10-4=6>>6\n#### 6"},
    {"question": "How much is 1,000 + 200?", "answer": "#### 1,200"},
]


def test_sample_is_installed_and_reproducible(tmp_path: Path) -> None:
    assert SAMPLE_DATASET_PATH.is_file()
    main(["--out", str(tmp_path / "s.jsonl")])  # the generator's defaults made the shipped file
    assert (tmp_path / "s.jsonl").read_bytes() == SAMPLE_DATASET_PATH.read_bytes()
    records = load_math_dataset()
    assert len(records) == 50
    for rec in records:
        assert rec.solution.splitlines()[-1] == f"#### {rec.answer}"


def test_sample_solutions_are_right() -> None:
    """Oracle: every <<expr=value>> annotation and the final line agree with arithmetic."""
    import re

    for row in generate_records(50, seed=0):
        for expr, value in re.findall(r"<<([\d+\-*/]+)=(\d+)>>", row["answer"]):
            a, op, b = re.fullmatch(r"(\d+)([-+*/])(\d+)", expr).groups()  # type: ignore[union-attr]
            result = {
                "+": int(a) + int(b),
                "-": int(a) - int(b),
                "*": int(a) * int(b),
                "/": int(a) / int(b),
            }[op]
            assert result == int(value), row
        assert int(extract_gsm8k_answer(row["answer"])) >= 0  # type: ignore[arg-type]


def test_env_default_is_the_sample() -> None:
    env = DatasetEnv()
    obs, info = env.reset(seed=1)
    assert obs.startswith("Question: ") and obs.endswith("\nAnswer:")
    assert info["solution"].endswith(f"#### {info['answer']}")
    assert env.step(info["solution"])[1] == 1.0  # the gold solution scores 1


def test_seeding_and_index(tmp_path: Path) -> None:
    env = DatasetEnv()
    picks = [env.reset(seed=s)[1]["index"] for s in range(20)]
    assert picks == [DatasetEnv().reset(seed=s)[1]["index"] for s in range(20)]
    assert len(set(picks)) > 5
    _, info = env.reset(options={"index": 3})
    assert info["index"] == 3
    with pytest.raises(IndexError, match="options\\['index'\\]"):
        env.reset(options={"index": 50})


def test_custom_jsonl_template_and_rewards(tmp_path: Path) -> None:
    path = write_jsonl(RECORDS, tmp_path / "tiny.jsonl")
    env = DatasetEnv(path=str(path), prompt_template="Q: {question}\nA:", format_reward=0.1)
    assert len(env) == 3
    obs, info = env.reset(options={"index": 2})
    assert obs == "Q: How much is 1,000 + 200?\nA:" and info["answer"] == "1200"
    for action, reward in [
        ("1000 + 200 = 1200\n#### 1200", 1.0),
        ("It is 1,200.", 1.0),
        ("#### 1201", 0.1),
        ("I think it is 12", 0.0),
        ("", 0.0),
    ]:
        env.reset(options={"index": 2})
        _, r, terminated, truncated, step_info = env.step(action)
        assert (r, terminated, truncated) == (reward, True, False), action
    assert step_info["parsed"] is None


def test_json_array_and_json_lines(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(RECORDS))
    (tmp_path / "b.json").write_text("\n".join(json.dumps(r) for r in RECORDS))
    assert load_math_dataset(tmp_path / "a.json") == load_math_dataset(tmp_path / "b.json")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"question": "q"}\n', r"record 0: missing or non-string field\(s\) \['answer'\]"),
        ('{"question": "q", "answer": 5}\n', "non-string"),
        ('{"question": "q", "answer": "no final line"}\n', "no final '#### <number>' line"),
        ("[1, 2]\n", "expected an object"),
        ('{"question": "q", "answer": "#### 1"}\nnot json\n', r"bad\.jsonl:2: not valid JSON"),
        ("\n", "has no records"),
    ],
)
def test_validation_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_math_dataset(path)


def test_path_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a file"):
        DatasetEnv(path=str(tmp_path / "missing.jsonl"))
    (tmp_path / "data.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match="unsupported extension '.csv'"):
        load_math_dataset(tmp_path / "data.csv")
    with pytest.raises(ValueError, match="prompt_template must contain"):
        DatasetEnv(prompt_template="no field")


def test_parquet_without_readers_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    monkeypatch.setattr(dataset_mod, "_has", lambda module: False)
    with pytest.raises(ImportError, match="pip install pyarrow"):
        load_math_dataset(tmp_path / "d.parquet")
    with pytest.raises(ImportError, match="pip install datasets"):
        load_math_dataset(SAMPLE_DATASET_PATH, backend="datasets")


def test_parquet_roundtrip(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="parquet support is optional (pyarrow or datasets)")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(RECORDS), tmp_path / "d.parquet")
    assert load_math_dataset(tmp_path / "d.parquet") == load_math_dataset(
        write_jsonl(RECORDS, tmp_path / "d.jsonl")
    )


def test_datasets_backend(tmp_path: Path) -> None:
    pytest.importorskip("datasets", reason="Hugging Face datasets is optional")
    path = write_jsonl(RECORDS, tmp_path / "d.jsonl")
    assert load_math_dataset(path, backend="datasets") == load_math_dataset(path, backend="plain")
