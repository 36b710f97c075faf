"""The agent-program contract (tinker_core.agent_program): an env played by run(task, client),
marked by its spec's ``agent_program`` so the trainer knows before it builds the env."""

from __future__ import annotations

import numpy as np
import pytest

import tinker_core
from tinker_core import AgentProgram, EnvSpec

SPEC = EnvSpec(id="test/program-v0", description="an agent program", agent_program=True)


class Echo(AgentProgram):
    env_spec = SPEC

    def __init__(self, tasks):
        super().__init__()
        self.tasks = list(tasks)

    def run(self, task, client):
        return {"reward": float(client(task) == task)}


def test_the_spec_flag_round_trips_and_is_omitted_when_false():
    assert EnvSpec.from_json(SPEC.to_json()) == SPEC and SPEC.to_dict()["agent_program"] is True
    plain = EnvSpec(id="test/plain-v0")
    assert "agent_program" not in plain.to_dict()  # older readers accept the JSON
    assert EnvSpec.from_dict(plain.to_dict()).agent_program is False


def test_a_program_shows_its_tasks_and_refuses_step():
    env = Echo(["a", "b", "c"])
    assert env.task(4) == "b"
    obs, info = env.reset(seed=5)
    assert (obs, info) == ("c", {"task": "c"})
    assert env.reset()[0] in {"a", "b", "c"}  # drawn from np_random without a seed
    with pytest.raises(RuntimeError, match=r"test/program-v0 is played by its agent program"):
        env.step("anything")
    assert env.score("a", env.run("a", lambda t: t)) == 1.0
    assert (env.isolation, env.entry, env.proxy) == ("thread", None, "openai")  # no child process without an entry


@pytest.mark.parametrize(("result", "reward"), [(1, 1.0), (True, 1.0), (np.float32(0.5), 0.5), ({"reward": 0.25}, 0.25)])
def test_score_takes_numbers_bools_and_reward_dicts(result, reward):
    assert Echo(["a"]).score("a", result) == reward


@pytest.mark.parametrize("result", [None, "1", float("nan"), {"score": 1}])
def test_score_refuses_anything_else(result):
    with pytest.raises(ValueError, match="not a reward"):
        Echo(["a"]).score("a", result)


def test_run_must_be_implemented_and_the_name_is_public():
    class NoRun(AgentProgram):
        env_spec = SPEC

    with pytest.raises(NotImplementedError, match="NoRun must implement run"):
        NoRun().run("t", None)
    assert tinker_core.AgentProgram is AgentProgram and "AgentProgram" in tinker_core.__all__
