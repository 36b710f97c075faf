"""DPO: data-file errors, pairing, loss oracles at the start, offline learning, on-policy pairs, exact resume."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tinker_algos import train
from tinker_algos.algorithms.dpo import best_worst_pairs, load_preference_pairs
from tinker_algos.records.metrics import read_metrics
from tinker_core import Trajectory, TrajectoryGroup
from tinker_core.errors import ConfigError

pytest.importorskip("tinker_env_math", reason="DPO's tests build pairs from, and sample on, math/arithmetic-v0 (tinker-env-math)")

ENV = {"id": "math/arithmetic-v0", "kwargs": {"digits": 1, "ops": ["+"]}, "eval_kwargs": {"digits": 1, "ops": ["+"], "split": "all"}}


pytestmark = pytest.mark.usefixtures("algos_and_math_plugins")


def write_pairs(path: Path, split: str, n: int, wrong_per_problem: int, seed: int) -> Path:
    """Correct answer (chosen) against wrong ones (rejected) for ``n`` one-digit sums of ``split``."""
    from tinker_env_math.arithmetic import arithmetic_problems

    rng = np.random.default_rng(seed)
    lines = []
    for p in arithmetic_problems(n, seed, digits=1, ops="+", split=split):
        wrong = rng.choice([x for x in range(19) if x != int(p.answer)], size=wrong_per_problem, replace=False)
        lines += [json.dumps({"prompt": p.prompt, "chosen": p.target, "rejected": f"{w}\n"}) for w in wrong]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Training pairs from the 89 train-split sums, held-out pairs from the 11 test-split ones."""
    d = tmp_path_factory.mktemp("pairs")
    return write_pairs(d / "train.jsonl", "train", 89, 3, 0), write_pairs(d / "heldout.jsonl", "test", 11, 3, 1)


def no_files(**over: Any) -> dict[str, Any]:
    return {"logging": {"tensorboard": False, "plot": False}, **over}


# ---- data files and options ---------------------------------------------------------------------

GOOD = '{"prompt": "1+1=", "chosen": "2\\n", "rejected": "3\\n"}'


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (GOOD + "\nnot json\n", r"pairs.jsonl:2 is not JSON"),
        (GOOD + '\n["a", "b"]\n', r"pairs.jsonl:2 must be a JSON object"),
        ('{"prompt": "1+1=", "chosen": "2\\n", "rejcted": "3\\n"}\n', r"pairs.jsonl:1 has no field 'rejected'; did you mean 'rejcted'\?"),
        ('{"prompt": "1+1=", "chosen": "2\\n"}\n', r"pairs.jsonl:1 has no field 'rejected' \(fields: prompt, chosen, rejected\)"),
        (GOOD + '\n\n{"prompt": "1+1=", "chosen": 2, "rejected": "3"}\n', r"pairs.jsonl:3 field 'chosen' must be a string, got int"),
        ('{"prompt": "1+1=", "chosen": "", "rejected": "3"}\n', r"pairs.jsonl:1 field 'chosen' is empty"),
        ('{"prompt": "1+1=", "chosen": "3", "rejected": "3"}\n', r"pairs.jsonl:1 fields 'chosen' and 'rejected' are the same"),
        ("\n\n", r"holds no records"),
    ],
)
def test_bad_pair_files_name_the_line_and_the_field(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "pairs.jsonl"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match) as err:
        load_preference_pairs(f)
    assert err.value.problems[0].startswith("algorithm.data: ")


def test_bad_data_and_options_fail_before_training(tmp_path: Path, pair_files: tuple[Path, Path]) -> None:
    def job(**algo: Any) -> dict[str, Any]:
        return {"model": {"name": "tiny"}, "algorithm": {"name": "dpo", "steps": 1, **algo}, **no_files()}

    with pytest.raises(ConfigError, match=r"algorithm.data: file .*missing.jsonl does not exist"):
        train(job(data=str(tmp_path / "missing.jsonl")), run_dir=tmp_path / "a")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(GOOD + "\n{oops\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.jsonl:2 is not JSON"):
        train(job(data=str(bad)), run_dir=tmp_path / "b")
    with pytest.raises(ConfigError, match=r"algorithm.params.eval_data: file .*nope.jsonl does not exist"):
        train(job(data=str(pair_files[0]), params={"eval_data": str(tmp_path / "nope.jsonl")}), run_dir=tmp_path / "c")
    with pytest.raises(ConfigError, match=r"algorithm.loss: dpo needs a preference loss"):
        train(job(data=str(pair_files[0]), loss="ppo"), run_dir=tmp_path / "d")
    with pytest.raises(ConfigError, match=r"algorithm.micro_batch_size: .*must be even, got 3"):
        train(job(data=str(pair_files[0]), micro_batch_size=3), run_dir=tmp_path / "e")
    with pytest.raises(ConfigError, match=r"algorithm.loss_config: .*'gamma'"):
        train(job(data=str(pair_files[0]), loss_config={"gamma": 1.0}), run_dir=tmp_path / "f")
    with pytest.raises(ConfigError, match=r"algorithm.params.evaldata: unknown key; did you mean 'eval_data'"):
        train(job(data=str(pair_files[0]), params={"evaldata": "x"}), run_dir=tmp_path / "g")
    with pytest.raises(ConfigError, match=r"needs 'algorithm.data' .* or an 'env'"):
        train(job(), run_dir=tmp_path / "h")
    with pytest.raises(ConfigError, match=r"rollout.group_size: on-policy dpo .* got 1"):
        train({**job(), "env": ENV, "rollout": {"group_size": 1}}, run_dir=tmp_path / "i")


def _groups(rewards: list[float], groups: list[int]) -> tuple[list[TrajectoryGroup], list[Trajectory]]:
    """Groups of one-token trajectories with these rewards (group labels in order), and the rows."""
    rows = [Trajectory([1], [0.0], [1], [r], group_id=g) for r, g in zip(rewards, groups, strict=True)]
    return [TrajectoryGroup([t for t in rows if t.group_id == g]) for g in dict.fromkeys(groups)], rows


def test_best_and_worst_of_each_group_are_paired() -> None:
    groups, t = _groups([0.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 1.0, 0.0], [0, 0, 0, 1, 1, 1, 2, 2, 2])

    def picked(pairs: list[tuple[Trajectory, Trajectory]]) -> list[tuple[int, int]]:
        return [(next(i for i, x in enumerate(t) if x is b), next(i for i, x in enumerate(t) if x is w)) for b, w in pairs]

    assert picked(best_worst_pairs(groups)) == [(1, 0), (7, 8)]  # group 1 is a tie; earliest wins ties
    assert picked(best_worst_pairs(groups, min_gap=0.5)) == [(1, 0), (7, 8)]
    assert best_worst_pairs(groups, min_gap=1.0) == []
    two, t = _groups([0.0, 1.0], [5, 5])
    assert picked(best_worst_pairs(two)) == [(1, 0)]


# ---- losses and learning ------------------------------------------------------------------------


def offline_job(pair_files: tuple[Path, Path], **algo: Any) -> dict[str, Any]:
    train_file, heldout = pair_files
    return {
        "seed": 0,
        "model": {"name": "tiny"},
        "env": ENV,
        "algorithm": {
            "name": "dpo", "steps": 40, "batch_size": 32, "eval_size": 64, "data": str(train_file),
            "params": {"eval_data": str(heldout)}, "loss_config": {"beta": 1.0}, **algo,
        },
        "optimizer": {"lr": 1e-3},
        **no_files(),
    }


def test_offline_dpo_learns_held_out_preferences(tmp_path: Path, pair_files: tuple[Path, Path]) -> None:
    result = train(offline_job(pair_files), run_dir=tmp_path)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    # step 1: the policy is the reference, so every implicit reward is 0 and the loss is log 2
    assert rows[0]["losses/dpo"] == pytest.approx(math.log(2), abs=1e-6)
    assert rows[0]["dpo/accuracy"] == 0.0 and rows[0]["dpo/reward_margin"] == pytest.approx(0.0, abs=1e-6)
    assert all(r["dpo/pairs"] == 32 for r in rows)
    late = rows[-10:]
    assert np.mean([r["losses/dpo"] for r in late]) < 0.55
    assert np.mean([r["dpo/accuracy"] for r in late]) > 0.7
    # held out: 33 pairs on the 11 sums that never appear in the training pairs (0.0 at the start)
    assert result.eval["eval/preference_accuracy"] >= 0.65, result.eval
    assert result.eval["eval/reward_margin"] > 0.3, result.eval
    assert result.eval["eval/preference_loss"] < math.log(2), result.eval
    assert "eval/accuracy" in result.eval  # the env is evaluated too


@pytest.mark.parametrize(
    ("loss", "loss_config", "start"),
    [("ipo", {"beta": 0.5}, 1.0), ("cdpo", {"beta": 0.1, "label_smoothing": 0.1}, math.log(2)), ("dpo", {"beta": 0.1}, math.log(2))],
)
def test_loss_variants_start_at_their_oracle_and_go_down(tmp_path: Path, pair_files: tuple[Path, Path], loss: str, loss_config: dict[str, float], start: float) -> None:
    """At Delta = 0: DPO and cDPO give log 2, IPO (0 - 1 / (2 beta))^2 = 1 for beta = 0.5.

    Eight pairs, all in every step (in micro-batches of two pairs), so the loss must go down.
    """
    few = tmp_path / "few.jsonl"
    few.write_text("".join(pair_files[0].read_text().splitlines(keepends=True)[:8]), encoding="utf-8")
    cfg = offline_job((few, pair_files[1]), loss=loss, loss_config=loss_config, steps=6, batch_size=8, micro_batch_size=4, eval_size=4)
    train(cfg, run_dir=tmp_path / "run")
    losses = [r["losses/dpo"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")]
    assert losses[0] == pytest.approx(start, abs=1e-6)
    assert losses[-1] < losses[0], losses


def test_on_policy_dpo_pairs_the_best_and_worst_samples(tmp_path: Path, stop_after: Any, deterministic_metrics: Any) -> None:
    """SFT warm start, then DPO on pairs built from the env's rewards on the model's own samples.

    Also resumed at the stage boundary: the reference must be the SFT result there too.
    """
    cfg = {
        "seed": 0,
        "model": {"name": "tiny"},
        "env": ENV,
        "stages": [
            {"name": "sft", "algorithm": {"name": "sft", "steps": 30, "batch_size": 32, "eval_size": 16}, "optimizer": {"lr": 1e-3}},
            {"name": "dpo", "algorithm": {"name": "dpo", "steps": 3, "eval_size": 16, "loss_config": {"beta": 0.5}}, "optimizer": {"lr": 1e-4}},
        ],
        "rollout": {"prompts_per_step": 16, "group_size": 4, "max_new_tokens": 4},
        **no_files(),
    }
    result = train(cfg, run_dir=tmp_path / "whole")
    assert result.status == "completed"
    rows = [r for r in read_metrics(tmp_path / "whole" / "metrics.jsonl") if r["stage"] == "dpo"]
    assert len(rows) == 3
    for r in rows:
        assert r["dpo/pairs"] > 0 and r["dpo/pair_rate"] == r["dpo/pairs"] / 16
        assert r["dpo/pair_reward_gap"] > 0  # chosen always earned more than rejected
        assert np.isfinite(r["losses/dpo"]) and r["rollout/episodes"] == 64
    # the reference is the stage's starting policy (the SFT result), so the first loss is log 2
    assert rows[0]["losses/dpo"] == pytest.approx(math.log(2), abs=1e-6)
    assert train(cfg, run_dir=tmp_path / "split", callbacks=stop_after(30)).status == "interrupted"
    assert train(cfg, run_dir=tmp_path / "split").status == "completed"
    assert deterministic_metrics(tmp_path / "split") == deterministic_metrics(tmp_path / "whole")


def test_resume_is_bit_identical(tmp_path: Path, pair_files: tuple[Path, Path], stop_after: Any, deterministic_metrics: Any) -> None:
    cfg = offline_job(pair_files, steps=4, batch_size=8, eval_size=4)
    train(cfg, run_dir=tmp_path / "whole")
    assert train(cfg, run_dir=tmp_path / "split", callbacks=stop_after(2)).status == "interrupted"
    assert train(cfg, run_dir=tmp_path / "split").step == 4

    assert deterministic_metrics(tmp_path / "whole") == deterministic_metrics(tmp_path / "split")


def test_lora_reference_is_the_adapter_the_stage_starts_from(tmp_path: Path, pair_files: tuple[Path, Path], stop_after: Any, deterministic_metrics: Any) -> None:
    """Under LoRA, a DPO stage after an SFT stage scores its reference with the SFT adapter, not
    the base model: the first loss is log 2 (policy = reference), though SFT moved the adapter
    far from zero. Interrupted mid-stage, the resumed run gets that reference back from the
    checkpoint (not the adapter as it stood at the interruption) and continues exactly."""
    cfg = {
        "seed": 0,
        "model": {"name": "tiny"},
        "lora": {"rank": 4, "alpha": 8},
        "env": ENV,
        "stages": [
            {"name": "sft", "algorithm": {"name": "sft", "steps": 6, "batch_size": 16, "eval_every": 0}, "optimizer": {"lr": 1e-2}},
            {"name": "dpo", "algorithm": {"name": "dpo", "steps": 3, "batch_size": 16, "eval_every": 0, "data": str(pair_files[0]), "loss_config": {"beta": 1.0}}, "optimizer": {"lr": 1e-2}},
        ],
        "checkpoint": {"every": 1},
        **no_files(),
    }
    assert train(cfg, run_dir=tmp_path / "whole").status == "completed"
    rows = [r for r in read_metrics(tmp_path / "whole" / "metrics.jsonl") if r["stage"] == "dpo"]
    assert [r["step"] for r in rows] == [7, 8, 9]
    assert rows[0]["losses/dpo"] == pytest.approx(math.log(2), abs=1e-6)
    assert abs(rows[1]["losses/dpo"] - math.log(2)) > 1e-3  # the policy moved off its reference
    assert train(cfg, run_dir=tmp_path / "split", callbacks=stop_after(8)).status == "interrupted"
    assert train(cfg, run_dir=tmp_path / "split").status == "completed"
    assert deterministic_metrics(tmp_path / "split") == deterministic_metrics(tmp_path / "whole")
