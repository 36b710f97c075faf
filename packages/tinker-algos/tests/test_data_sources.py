"""``algorithm.data`` beyond JSONL: parquet, save_to_disk folders and ``datasets.load_dataset`` sources,
with splits, field mappings and a row bound -- built offline with ``datasets`` itself.

The oracle for training: one SFT step (and one DPO step) from each source gives exactly the loss
of the same step from the equivalent JSONL file, so each source hands the algorithm the same
records in the same order.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tinker_algos import train
from tinker_algos.algorithms.dpo import PreferencePair, load_preference_pairs
from tinker_algos.algorithms.sft import load_sft_records
from tinker_algos.hub.data_sources import read_records
from tinker_algos.records.metrics import read_metrics
from tinker_core.config import DataSource
from tinker_core.errors import ConfigError

datasets = pytest.importorskip("datasets", reason="the data sources beyond JSONL need tinker-algos[hub] (datasets, pyarrow)")

pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")

TRAIN = {
    "question": [f"{a}+{b}=" for a, b in [(1, 2), (3, 4), (2, 2), (5, 1), (0, 7), (4, 4)]],
    "answer": ["3\n", "7\n", "4\n", "6\n", "7\n", "8\n"],
    "wrong": ["4\n", "1\n", "5\n", "9\n", "2\n", "3\n"],
}
TEST = {"question": ["6+1=", "2+3="], "answer": ["7\n", "5\n"], "wrong": ["8\n", "1\n"]}
SFT_FIELDS = {"prompt": "question", "completion": "answer"}
DPO_FIELDS = {"prompt": "question", "chosen": "answer", "rejected": "wrong"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same tiny table as parquet, a save_to_disk DatasetDict, a Hub-style repo folder and JSONL."""
    d = tmp_path_factory.mktemp("data")
    train_ds, test_ds = datasets.Dataset.from_dict(TRAIN), datasets.Dataset.from_dict(TEST)
    train_ds.to_parquet(str(d / "train.parquet"))
    datasets.DatasetDict({"train": train_ds, "test": test_ds}).save_to_disk(str(d / "saved"))
    train_ds.save_to_disk(str(d / "saved_one"))
    (d / "repo" / "data").mkdir(parents=True)  # the layout of a Hub dataset repo
    train_ds.to_parquet(str(d / "repo" / "data" / "train-00000-of-00001.parquet"))
    test_ds.to_parquet(str(d / "repo" / "data" / "test-00000-of-00001.parquet"))
    rows = [dict(zip(TRAIN, values, strict=True)) for values in zip(*TRAIN.values(), strict=True)]
    (d / "sft.jsonl").write_text("".join(json.dumps({"prompt": r["question"], "completion": r["answer"]}) + "\n" for r in rows))
    (d / "dpo.jsonl").write_text("".join(json.dumps({"prompt": r["question"], "chosen": r["answer"], "rejected": r["wrong"]}) + "\n" for r in rows))
    return {"parquet": d / "train.parquet", "disk": d / "saved", "disk_one": d / "saved_one", "repo": d / "repo", "dir": d}


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_dataset's cache in the test's folder, offline."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


def source(sources: dict[str, Path], kind: str, **over: Any) -> DataSource:
    if kind == "repo":
        return DataSource(hub=str(sources["repo"]), **over)
    return DataSource(path=str(sources[kind]), **over)


SFT_WANT = list(zip(TRAIN["question"], TRAIN["answer"], strict=True))


@pytest.mark.parametrize("kind", ["parquet", "disk", "disk_one", "repo"])
def test_each_source_gives_the_rows_renamed_in_order(sources: dict[str, Path], kind: str) -> None:
    assert load_sft_records(source(sources, kind, fields=SFT_FIELDS)) == SFT_WANT
    pairs = load_preference_pairs(source(sources, kind, fields=DPO_FIELDS))
    assert pairs == [PreferencePair(*r) for r in zip(TRAIN["question"], TRAIN["answer"], TRAIN["wrong"], strict=True)]


@pytest.mark.parametrize("kind", ["disk", "repo"])
def test_split_picks_the_split_and_max_rows_bounds_it(sources: dict[str, Path], kind: str) -> None:
    assert load_sft_records(source(sources, kind, split="test", fields=SFT_FIELDS)) == list(zip(TEST["question"], TEST["answer"], strict=True))
    assert load_sft_records(source(sources, kind, max_rows=2, fields=SFT_FIELDS)) == SFT_WANT[:2]


def test_a_jsonl_file_takes_fields_and_max_rows(sources: dict[str, Path]) -> None:
    jsonl = sources["dir"] / "dpo.jsonl"
    renamed = read_records(DataSource(path=str(jsonl), fields={"completion": "chosen"}, max_rows=3), "algorithm.data", "", [("prompt", "completion")])
    assert [r["completion"] for _, r in renamed] == TRAIN["answer"][:3]
    assert renamed[0][0].endswith("dpo.jsonl:1")
    assert load_sft_records(sources["dir"] / "sft.jsonl") == SFT_WANT  # a plain path, as before


@pytest.mark.parametrize(
    ("kind", "over", "match"),
    [
        ("parquet", {"fields": {"prompt": "questoin", "completion": "answer"}},
         r"algorithm.data.fields.prompt: .*train.parquet has no column 'questoin'; did you mean 'question'\? \(its columns: question, answer, wrong\)"),
        ("parquet", {}, r"algorithm.data: .*train.parquet has no columns prompt\+completion or messages \(its columns: question, answer, wrong\); map them with fields, e.g. fields: \{prompt: COLUMN, completion: COLUMN\}"),
        ("parquet", {"fields": {"promt": "question"}}, r"algorithm.data.fields: 'promt' is not a field this algorithm reads; did you mean 'prompt'\?"),
        ("parquet", {"split": "train"}, r"algorithm.data.split: .*train.parquet is one parquet file, one split; remove split"),
        ("disk", {"split": "validation", "fields": SFT_FIELDS}, r"algorithm.data.split: .*saved\[validation\] has no split 'validation' \(its splits: train, test\); set split"),
        ("disk_one", {"split": "test", "fields": SFT_FIELDS}, r"algorithm.data.split: .*saved_one\[test\] is one dataset without splits; remove split"),
        ("repo", {"split": "validation", "fields": SFT_FIELDS}, r"algorithm.data.split: .*repo\[validation\]: Unknown split \"validation\". Should be one of \['train', 'test'\]"),
        ("dir", {}, r"algorithm.data.path: .* is a folder but not one written by datasets' save_to_disk .*write hub: "),
    ],
)
def test_bad_sources_name_the_field_what_the_data_has_and_the_fix(sources: dict[str, Path], kind: str, over: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_sft_records(source(sources, kind, **over))


def test_a_hub_id_that_is_not_cached_offline_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"algorithm.data.hub: datasets could not load 'opentinker-tests/no-such-dataset' .*HF_HUB_OFFLINE=1 only datasets already in the local cache load"):
        load_sft_records(DataSource(hub="opentinker-tests/no-such-dataset"))


def one_step(tmp_path: Path, name: str, data: Any, **algo: Any) -> float:
    cfg = {
        "seed": 0, "model": {"name": "tiny"},
        "algorithm": {"name": name, "steps": 1, "batch_size": 4, "data": data, **algo},
        "optimizer": {"lr": 1e-3}, "logging": {"tensorboard": False, "plot": False},
    }
    run = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    train(cfg, run_dir=run)
    (row,) = read_metrics(run / "metrics.jsonl")
    return row[f"losses/{name}"]


def test_one_sft_and_one_dpo_step_from_each_source_equal_the_jsonl_ones(sources: dict[str, Path], tmp_path: Path) -> None:
    sft_jsonl = one_step(tmp_path, "sft", str(sources["dir"] / "sft.jsonl"))
    dpo_jsonl = one_step(tmp_path, "dpo", str(sources["dir"] / "dpo.jsonl"))
    assert dpo_jsonl == pytest.approx(math.log(2), abs=1e-6)  # step 1: policy = reference
    for kind in ("parquet", "disk", "repo"):
        key = "hub" if kind == "repo" else "path"
        assert one_step(tmp_path, "sft", {key: str(sources[kind]), "fields": SFT_FIELDS}) == sft_jsonl, kind
        assert one_step(tmp_path, "dpo", {key: str(sources[kind]), "fields": DPO_FIELDS}) == dpo_jsonl, kind
