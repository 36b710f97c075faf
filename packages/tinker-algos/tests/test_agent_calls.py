"""Merging an agent episode's proxy calls into trajectories (tinker_algos.rollout.agent_calls), and the
agent-program env's configuration errors (tinker_algos.rollout.agent_program). The proxy itself, with the
openai client, is tested in tinker-serve (tests/test_rollout_proxy.py)."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from tinker_algos.rollout.agent_calls import EpisodeLog, ProxyCall, UnknownEpisode, merge_calls
from tinker_core.errors import ConfigError


def call(prompt: list[int], completion: list[int], reason: str = "stop") -> ProxyCall:
    return ProxyCall(tuple(prompt), tuple(completion), tuple(-0.1 * (i + 1) for i in range(len(completion))), reason)


def test_calls_that_extend_their_context_are_one_trajectory_with_only_sampled_tokens_trained():
    a = call([1, 2, 3], [10, 11])
    b = call([1, 2, 3, 10, 11, 4, 5], [12])  # tool result [4, 5] appended after the sample
    c = call([1, 2, 3, 10, 11, 4, 5, 12, 6], [13, 14, 15], "length")
    [traj] = merge_calls([a, b, c], reward=0.75, group_id=2, episode_id="ep")
    assert traj.tokens_T.tolist() == [1, 2, 3, 10, 11, 4, 5, 12, 6, 13, 14, 15]
    assert traj.loss_mask_T.tolist() == [0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1]
    np.testing.assert_allclose(traj.sampler_logprobs_T[traj.loss_mask_T > 0], [-0.1, -0.2, -0.1, -0.1, -0.2, -0.3], rtol=1e-6)
    assert traj.sampler_logprobs_T[traj.loss_mask_T == 0].tolist() == [0.0] * 6
    assert traj.turn_rewards == [0.0, 0.0, 0.75] and traj.group_id == 2
    assert traj.info == {"stop_reason": "length", "episode_id": "ep", "segment": 0}


def test_a_call_that_rewrites_history_starts_a_new_segment():
    a = call([1, 2], [10])
    b = call([1, 2, 10, 3], [11])
    rewritten = call([1, 9], [12])  # the agent summarised its history
    d = call([1, 9, 12, 4], [13])
    trajs = merge_calls([a, b, rewritten, d], reward=1.0)
    assert [t.tokens_T.tolist() for t in trajs] == [[1, 2, 10, 3, 11], [1, 9, 12, 4, 13]]
    assert [t.info["segment"] for t in trajs] == [0, 1]
    assert all(t.reward == 1.0 and t.turn_rewards[-1] == 1.0 for t in trajs)
    # a prompt shorter than the context (it drops the sample) is a rewrite too
    assert len(merge_calls([call([1, 2], [3]), call([1, 2], [4])], reward=0.0)) == 2


def test_a_call_needs_a_logprob_per_token():
    with pytest.raises(ValueError, match="2 completion ids but 1 logprobs"):
        ProxyCall((1,), (2, 3), (-0.5,), "stop")


def test_the_episode_log_keeps_episodes_apart_and_refuses_closed_ones():
    log = EpisodeLog()
    for ep in ("a", "b"):
        log.open(ep)
    with pytest.raises(ValueError, match="already open"):
        log.open("a")

    def agent(ep: str, token: int) -> None:
        for _ in range(200):
            log.add(ep, call([token], [token]))

    threads = [threading.Thread(target=agent, args=(ep, t)) for ep, t in (("a", 1), ("b", 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {c.prompt_ids for c in log.close("a")} == {(1,)} and {c.prompt_ids for c in log.close("b")} == {(2,)}
    assert not log.is_open("a")
    with pytest.raises(UnknownEpisode):
        log.add("a", call([1], [1]))


def test_the_agent_program_env_names_the_field_and_the_fix(tmp_path, monkeypatch):
    from tinker_algos.rollout.agent_program import AgentProgramEnv

    (tmp_path / "tiny_agent.py").write_text("TASKS = [1, 2]\n\ndef run(task, client):\n    return 1.0\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    env = AgentProgramEnv(entry="tiny_agent:run", tasks="tiny_agent:TASKS", path=str(tmp_path))
    assert env.tasks == [1, 2] and env.task(3) == 2 and env.reset(seed=4)[0] == "1"
    assert env.score(1, {"reward": 0.5}) == 0.5 and env.score(1, True) == 1.0
    with pytest.raises(ValueError, match="not a reward"):
        env.score(1, "text")
    with pytest.raises(RuntimeError, match="played by its agent program"):
        env.step("x")
    with pytest.raises(ConfigError, match=r"env.kwargs.entry: 'tiny_agent\.run' is not 'module:attr'"):
        AgentProgramEnv(entry="tiny_agent.run", tasks=[1])
    with pytest.raises(ConfigError, match="env.kwargs.entry: cannot load 'missing_mod:run'.*env.kwargs.path"):
        AgentProgramEnv(entry="missing_mod:run", tasks=[1])
    with pytest.raises(ConfigError, match="env.kwargs.tasks: no tasks"):
        AgentProgramEnv(entry="tiny_agent:run", tasks=[], path=str(tmp_path))
    with pytest.raises(ConfigError, match="env.kwargs.timeout_s"):
        AgentProgramEnv(entry="tiny_agent:run", tasks=[1], timeout_s=0, path=str(tmp_path))


def test_a_missing_rollout_proxy_is_one_error_naming_the_install(tmp_path, monkeypatch):
    from tinker_algos.rollout.agent_program import AgentProgramEnv, proxy_starter

    (tmp_path / "tiny_agent2.py").write_text("def run(task, client):\n    return 1.0\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    env = AgentProgramEnv(entry="tiny_agent2:run", tasks=[1], path=str(tmp_path), proxy="no-such-proxy")
    with pytest.raises(ConfigError, match="needs the rollout proxy 'no-such-proxy'.*pip install 'tinker-serve' openai"):
        proxy_starter(env)


def test_the_transcript_shows_each_prompt_after_the_context_it_extends():
    from tinker_algos.rollout.agent_calls import transcript

    calls = [ProxyCall((1, 2), (3,), (-0.1,), "stop", "a"), ProxyCall((1, 2, 3, 4), (5,), (-0.1,), "stop", "b"),
             ProxyCall((9,), (6,), (-0.1,), "stop", "c")]
    assert transcript(calls, lambda ids: ",".join(map(str, ids))) == [("1,2", "a"), ("4", "b"), ("9", "c")]


@pytest.mark.parametrize("kwargs, field", [
    ({"entry": "pty:spawn"}, "entry"),
    ({"entry": "subprocess:check_call"}, "entry"),
    ({"entry": "fenced_agent:run", "tasks": "os:listdir"}, "tasks"),
    ({"entry": "fenced_agent:run", "reward": "subprocess:call"}, "reward"),
])
def test_in_a_schedulers_job_only_allowed_code_is_imported(tmp_path, monkeypatch, kwargs, field):
    """The worker's side of a scheduler's allowed_imports (tinker_core.import_policy.enforced): the
    env refuses before importing anything, so the command its task names never runs."""
    from tinker_algos.rollout.agent_program import AgentProgramEnv
    from tinker_core.import_policy import ImportPolicy, ImportRefused, enforced

    (tmp_path / "fenced_agent.py").write_text("TASKS = [1]\n\ndef run(task, client):\n    return 1.0\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])  # importable, as an installed package is
    marker = tmp_path / "ran"
    args = {"tasks": [["sh", "-c", f"touch {marker}"]], **kwargs}
    with enforced(ImportPolicy(("fenced_agent:*",))):
        with pytest.raises(ImportRefused, match=rf"^env.kwargs.{field}: '{kwargs[field]}' is not code this scheduler"):
            AgentProgramEnv(**args)
        # the allowed program loads, from the installed packages only: a folder on sys.path is refused
        assert AgentProgramEnv(entry="fenced_agent:run", tasks="fenced_agent:TASKS").tasks == [1]
        with pytest.raises(ImportRefused, match=r"^env.kwargs.path: .*installed packages only"):
            AgentProgramEnv(entry="fenced_agent:run", tasks=[1], path=str(tmp_path))
    assert not marker.exists()


def test_an_isolated_episodes_child_process_enforces_the_same_policy(tmp_path):
    from tinker_algos.rollout.agent_isolation import ProcessPlay
    from tinker_core.import_policy import ImportPolicy, enforced

    marker = tmp_path / "ran"
    with enforced(ImportPolicy(("fenced_agent:*",))):
        play = ProcessPlay("os:system", None, f"touch {marker}", "ep-0-0", "http://127.0.0.1:9", 30.0, tmp_path / "out.json")
    play.start()
    play.wait(60)
    play.stop()
    finished, _, reason, detail = play.outcome()
    assert finished and reason == "agent_error" and "env.kwargs.entry: 'os:system' is not code this scheduler" in detail
    assert not marker.exists()
