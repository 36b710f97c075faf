"""Rollout records (``rollouts.jsonl``) and per-phase traces (``trace.json``) of a real short run.

The formats are checked as a reader sees them: every record has the documented keys and types,
and the trace parses against the Chrome trace-event format (the JSON Array Format, left open so it
can grow). Recording never changes what a seed fixes, and a resumed run records exactly what an
uninterrupted one does.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tinker_algos import train
from tinker_algos.records.memory import watch
from tinker_algos.records.metrics import read_metrics
from tinker_algos.records.recording import select
from tinker_core.run_files import read_rollouts
from tinker_core.traces import read_trace, summarise

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")

PHASES = {"step", "rollout", "sample", "env", "forward_backward", "optim_step", "evaluate", "checkpoint", "record"}
RECORD_KEYS = {
    "v": int, "kind": str, "stage": str, "step": int, "group": int, "episode": int, "prompt": str,
    "messages": (list, type(None)), "turns": list, "reward": float, "advantage": (float, type(None)),
    "stop_reason": str, "new_tokens": int,
}
TURN_KEYS = {"role": str, "text": str, "tokens": int, "token_texts": (list, type(None)), "logprobs": (list, type(None)), "tool_calls": (list, type(None))}


def job(rollouts=None, trace=True, **over):
    """Two SFT steps, then three GRPO steps of 3 tasks x 4 episodes, evaluating every 2 (echo env)."""
    logging = {"tensorboard": False, "plot": False, "trace": trace}
    if rollouts is not None:
        logging["rollouts"] = rollouts
    cfg = {
        "name": "recorded", "seed": 7, "model": {"name": "tiny"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd", "ef"]}},
        "stages": [
            {"name": "warm", "algorithm": {"name": "sft", "steps": 2, "batch_size": 8, "eval_size": 4}},
            {"name": "rl", "algorithm": {"name": "grpo", "steps": 3, "eval_size": 6, "eval_every": 2}},
        ],
        "rollout": {"prompts_per_step": 3, "group_size": 4, "max_new_tokens": 4, "stop": ["\n"]},
        "optimizer": {"lr": 0.003},
        "checkpoint": {"every": 2, "keep": 5},
        "logging": logging,
    }
    cfg.update(over)
    return cfg


def check_record(rec: dict) -> None:
    for key, kind in RECORD_KEYS.items():
        assert isinstance(rec[key], kind), (key, rec[key])
    assert rec["v"] == 1 and rec["kind"] in ("train", "eval")
    roles = [t["role"] for t in rec["turns"]]
    assert roles and roles[0] == "policy" and set(roles) <= {"policy", "env"}
    for turn in rec["turns"]:
        for key, kind in TURN_KEYS.items():
            assert isinstance(turn[key], kind), (key, turn)
        if turn["role"] == "policy":
            assert len(turn["token_texts"]) == len(turn["logprobs"]) == turn["tokens"] > 0
            assert all(lp <= 0 for lp in turn["logprobs"])
    assert rec["new_tokens"] == sum(t["tokens"] for t in rec["turns"] if t["role"] == "policy")
    assert rec["stop_reason"] in ("eos", "stop_id", "stop_string", "length")
    assert rec["prompt"].startswith("<bos>Say: ") and rec["messages"][0] == {"role": "user", "content": rec["prompt"][5:]}


def check_trace_file(path) -> list[dict]:
    """The trace-event format: a JSON array, one event per line each followed by a comma, the
    closing bracket left out; complete events with every required key and dur >= 0."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "[" and all(line.endswith(",") for line in lines[1:]) and "]" not in lines[-1][-1:]
    events = json.loads("[" + "".join(lines[1:]).rstrip(",") + "]")
    assert events == read_trace(path)
    for ev in events:
        assert ev["ph"] in ("X", "M") and isinstance(ev["pid"], int) and isinstance(ev["tid"], int) and isinstance(ev["name"], str)
        if ev["ph"] == "X":
            assert ev["cat"] == "step" and isinstance(ev["ts"], (int, float)) and isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0
            assert {"stage", "step"} <= set(ev["args"]) <= {"stage", "step", "peak_rss_gib", "peak_cuda_gib"}
        else:
            assert ev["name"] in ("process_name", "thread_name") and isinstance(ev["args"]["name"], str)
    return events


def test_a_run_records_its_episodes_and_the_phases_of_every_step(tmp_path):
    result = train(job(rollouts={"per_step": 5, "keep": "best-and-worst"}), run_dir=tmp_path)
    assert result.status == "completed"

    lines = (tmp_path / "rollouts.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    for rec in records:
        check_record(rec)
    train_recs = [r for r in records if r["kind"] == "train"]
    assert sorted({r["step"] for r in train_recs}) == [3, 4, 5] and {r["stage"] for r in train_recs} == {"rl"}
    for step in (3, 4, 5):
        these = [r for r in train_recs if r["step"] == step]
        assert len(these) == 5 and len({r["episode"] for r in these}) == 5  # 5 of the step's 12 episodes
        assert all(0 <= r["group"] < 3 and 0 <= r["episode"] < 12 and r["advantage"] is not None for r in these)
    # held-out evaluations: at each evaluation (steps 2, 4, 5), at most per_step episodes, no advantage
    evals = [r for r in records if r["kind"] == "eval"]
    assert sorted({r["step"] for r in evals}) == [2, 4, 5] and all(r["advantage"] is None for r in evals)
    assert all(len([r for r in evals if r["step"] == s]) == {2: 4, 4: 5, 5: 5}[s] for s in (2, 4, 5))
    assert [r.model_dump(mode="json") for r in read_rollouts(tmp_path)] == records

    events = check_trace_file(tmp_path / "trace.json")
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["name"] for e in complete} == PHASES
    steps = {e["args"]["step"]: e for e in complete if e["name"] == "step"}
    assert sorted(steps) == [1, 2, 3, 4, 5]
    for e in complete:  # every phase lies inside its step
        s = steps[e["args"]["step"]]
        assert s["ts"] - 1 <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1
        assert e["args"]["stage"] == ("warm" if e["args"]["step"] <= 2 else "rl")
    if watch().rss:  # each phase's peak resident set, none above its step's (the step's covers it)
        assert all(e["args"]["peak_rss_gib"] > 0 for e in complete)
        assert all(e["args"]["peak_rss_gib"] <= steps[e["args"]["step"]]["args"]["peak_rss_gib"] for e in complete)
        rows = read_metrics(tmp_path / "metrics.jsonl")
        assert all(0 < r["memory/forward_backward_rss_gib"] <= r["memory/step_rss_gib"] for r in rows)
        assert all(0 < r["memory/rollout_rss_gib"] <= r["memory/step_rss_gib"] for r in rows if r["stage"] == "rl")
    stats = {s.name: s for s in summarise(events)}
    assert stats["step"].count == 5 and stats["step"].share == 1.0
    assert stats["step"].peak_rss_gib == (max(e["args"]["peak_rss_gib"] for e in steps.values()) if watch().rss else None)
    assert stats["rollout"].count == 3 and 0 < stats["rollout"].share < 1
    assert stats["optim_step"].count == 5 and stats["checkpoint"].count == 3  # steps 2, 4, 5


def test_recording_changes_no_metric_and_per_step_0_records_nothing(tmp_path, deterministic_metrics):
    train(job(), run_dir=tmp_path / "on")
    train(job(rollouts={"per_step": 0}, trace=False), run_dir=tmp_path / "off")
    assert deterministic_metrics(tmp_path / "on") == deterministic_metrics(tmp_path / "off")
    assert (tmp_path / "on" / "rollouts.jsonl").is_file() and (tmp_path / "on" / "trace.json").is_file()
    assert not (tmp_path / "off" / "rollouts.jsonl").exists() and not (tmp_path / "off" / "trace.json").exists()


def _comparable(records):
    """What a seed fixes of the records (all of it here: texts, tokens, logprobs, rewards)."""
    return [r.model_dump(mode="json") for r in records]


@pytest.mark.parametrize("stop_at", [2, 4])
def test_a_resumed_run_records_exactly_what_an_uninterrupted_one_does(tmp_path, stop_at, stop_after, deterministic_metrics):
    rollouts = {"every": 2, "per_step": 6}
    train(job(rollouts=rollouts), run_dir=tmp_path / "full")
    part = train(job(rollouts=rollouts), run_dir=tmp_path / "part", callbacks=stop_after(stop_at))
    assert part.status == "interrupted"
    rest = train(job(rollouts=rollouts), run_dir=tmp_path / "part", callbacks=stop_after(10**9))
    assert rest.status == "completed"
    assert deterministic_metrics(tmp_path / "part") == deterministic_metrics(tmp_path / "full")
    full = read_rollouts(tmp_path / "full")
    assert {r.step for r in full if r.kind == "train"} == {4}  # every: 2 (global steps 3..5 train)
    assert _comparable(read_rollouts(tmp_path / "part")) == _comparable(full)
    events = read_trace(tmp_path / "part")  # the resumed run appended to the trace
    assert sum(e["name"] == "process_name" for e in events) == 2
    assert {e["args"]["step"] for e in events if e["name"] == "step"} == {1, 2, 3, 4, 5}


def test_select_keeps_the_first_or_the_best_and_the_worst():
    eps = [SimpleNamespace(reward=r) for r in (0.5, 1.0, 0.0, 1.0, 0.2, 0.0)]
    assert select(eps, 10, "all") == [0, 1, 2, 3, 4, 5]
    assert select(eps, 3, "all") == [0, 1, 2]
    assert select(eps, 4, "best-and-worst") == [1, 2, 3, 5]  # best two (1.0, 1.0), worst two (0.0, 0.0)
    assert select(eps, 3, "best-and-worst") == [1, 3, 5]  # two best, the last of the worst
    assert select(eps, 1, "best-and-worst") == [1]


def test_a_policy_turns_tool_calls_are_recorded_in_the_openai_format():
    """A failed episode (no trajectory) still records its turns' tool calls: a valid call in the
    OpenAI format, a malformed block as its error, a turn without calls as null."""
    from tinker_core.episodes import Episode

    good = '<tool_call>{"name": "calculator", "arguments": {"expression": "12+30"}}</tool_call>'
    episode = Episode(
        trajectory=None, reward=0.0, turns=3, success=False, error="timeout",
        transcript=[("What is 12+30?", good), ("<tool_response>42</tool_response>", "<tool_call>{oops</tool_call>"), ("x", "42")],
    )
    record = episode.to_record(None, kind="train", stage="grpo", step=1, episode=0)
    policy = [t for t in record.turns if t.role == "policy"]
    assert policy[0].tool_calls == [{"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "12+30"}'}}]
    assert len(policy[1].tool_calls) == 1 and "error" in policy[1].tool_calls[0]
    assert policy[2].tool_calls is None


def test_a_self_play_run_records_each_learner_seat_of_its_games(tmp_path, request):
    """Tic-tac-toe self-play (both seats learn): every recorded game appears once per seat, with the
    seat's role, its outcome, its own moves (each a policy turn with its tokens and logprobs), the
    GRPO group of (task, seat) and the advantage of that seat's trajectory."""
    pytest.importorskip("tinker_env_games", reason="plays tinker-env-games' tic-tac-toe")
    cfg = {
        "name": "ttt-recorded", "seed": 0, "model": {"name": "tiny"},
        "env": {"id": "games/tictactoe-v0", "kwargs": {"max_illegal_moves": 2}},
        "algorithm": {"name": "grpo", "steps": 2, "eval_size": 2, "eval_every": 2},
        "rollout": {"prompts_per_step": 2, "group_size": 3, "max_new_tokens": 3, "stop": ["\n"], "max_error_rate": 0.5},
        "optimizer": {"lr": 1e-3},
        "logging": {"tensorboard": False, "plot": False, "trace": False, "rollouts": {"per_step": 100}},
    }
    request.getfixturevalue("algos_and_games_plugins")  # after the importorskip
    result = train(cfg, run_dir=tmp_path)
    assert result.status == "completed"
    everything = read_rollouts(tmp_path / "rollouts.jsonl")
    evals = [r for r in everything if r.kind == "eval"]
    assert evals and {r.step for r in evals} == {2} and {r.agent for r in evals} == {"x", "o"}  # each seat in turn
    records = [r for r in everything if r.kind == "train"]
    assert {r.step for r in records} == {1, 2}
    for step in (1, 2):
        recs = [r for r in records if r.step == step]
        assert len(recs) == 2 * 3 * 2  # tasks x group x seats
        assert sorted(r.agent for r in recs) == ["o"] * 6 + ["x"] * 6
        for r in recs:
            assert r.group == (r.episode // 2 // 3) * 2 + ("x", "o").index(r.agent)  # (task, seat)
        by_game: dict[int, list] = {}
        for r in recs:
            by_game.setdefault(r.episode // 2, []).append(r)
        for pair in by_game.values():
            assert {r.agent for r in pair} == {"x", "o"}
            outcomes = {r.agent: r.outcome for r in pair}
            assert outcomes["x"] in ("win", "draw", "loss") or outcomes["x"].startswith("forfeit")
            if outcomes["x"] == "win":
                assert outcomes["o"] == "loss"
    acted = [r for r in records if r.error is None and r.turns]
    assert len(acted) >= len(records) // 2  # x moves first in every game
    for r in records:
        if not r.turns:  # a seat the game ended for before it moved (the other seat forfeited)
            assert r.advantage is None and r.new_tokens == 0
    for r in acted:
        policy = [t for t in r.turns if t.role == "policy"]
        assert policy and r.turns[0].role == "policy"
        assert "." in r.prompt or "board" in r.prompt.lower()  # it saw the board
        assert r.new_tokens == sum(t.tokens for t in policy) > 0
        assert all(len(t.logprobs) == len(t.token_texts) == t.tokens for t in policy)
        assert r.advantage is not None
        assert r.success == (r.outcome == "win")


def test_greedy_eval_records_carry_each_tokens_logprob_under_the_policy_not_the_point_mass(policy, tmp_path):
    """Greedy sampling draws from a point mass (sampler logprobs all 0); the records show the
    chosen tokens' logprobs under the untempered policy, recomputed here by a forward pass."""
    import numpy as np
    import torch

    import tinker_core
    from tinker_algos.model.models import sequence_logprobs
    from tinker_algos.records import recording
    from tinker_algos.rollout.episodes import rollout
    from tinker_algos.sampling.sampler import SamplingParams
    from tinker_core.episodes import UNTEMPERED

    params = SamplingParams(max_new_tokens=4, temperature=0.0, stop=("\n",), seed=0)
    result = rollout(policy, lambda: tinker_core.make_env("echo/echo-v0"), [0, 1, 2], params)
    for i, e in enumerate(result.episodes):
        traj = e.trajectory
        policy_T = traj.loss_mask_T > 0
        assert np.all(traj.sampler_logprobs_T == 0.0)  # the point mass, what the trainer would see
        tokens = torch.as_tensor(traj.tokens_T)[None]
        with torch.no_grad():
            oracle_T = sequence_logprobs(policy.model, tokens, torch.ones_like(tokens)).numpy()[0]
        assert np.allclose(traj.info[UNTEMPERED][policy_T], oracle_T[policy_T], atol=1e-4)
        assert np.all(oracle_T[policy_T] < 0)  # the untrained tiny model is never certain
        record = e.to_record(policy.tokenizer, kind="eval", stage="echo/echo-v0", step=0, episode=i)
        shown = [lp for turn in record.turns if turn.role == "policy" for lp in turn.logprobs]
        assert shown == [round(float(x), 5) for x in traj.info[UNTEMPERED][policy_T]]
    # a training record keeps the sampler's logprobs
    train_record = result.episodes[0].to_record(policy.tokenizer, kind="train", stage="s", step=1, episode=0)
    assert all(lp == 0.0 for turn in train_record.turns if turn.role == "policy" for lp in turn.logprobs)
    # and opentinker eval's transcripts show them (through the recorder)
    with recording.transcripts(tmp_path / "t.jsonl", stage="echo/echo-v0", step=0):
        recording.record_eval(result, policy.tokenizer)
    for rec in read_rollouts(tmp_path / "t.jsonl"):
        assert rec.turns[0].logprobs and all(lp < 0 for lp in rec.turns[0].logprobs)
