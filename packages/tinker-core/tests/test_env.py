from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinker_core import EnvSpec, MultiAgentTextEnv, TextEnv
from tinker_core.env import parse_env_id

ids = st.from_regex(r"[a-z][a-z0-9_]{0,8}/[A-Za-z][A-Za-z0-9_-]{0,10}-v[0-9]{1,2}", fullmatch=True)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=8))


@given(
    env_id=ids,
    description=st.text(max_size=30),
    max_turns=st.integers(1, 100),
    lo=st.floats(-10, 0, allow_nan=False),
    width=st.floats(0, 10, allow_nan=False),
    roles=st.lists(st.text(min_size=1, max_size=6), max_size=3, unique=True),
    metadata=st.dictionaries(st.text(max_size=5), json_scalars, max_size=3),
)
def test_env_spec_json_round_trip_is_exact(env_id, description, max_turns, lo, width, roles, metadata):
    spec = EnvSpec(
        id=env_id,
        description=description,
        max_turns=max_turns,
        reward_range=(lo, lo + width),
        roles=tuple(roles),
        metadata=metadata,
    )
    again = EnvSpec.from_json(spec.to_json())
    assert again == spec
    assert json.loads(again.to_json()) == json.loads(spec.to_json())
    assert pickle.loads(pickle.dumps(spec)) == spec


@pytest.mark.parametrize("bad", ["arithmetic-v0", "Math/arithmetic-v0", "math/arithmetic", "math/arith metic-v0", "math/-v0"])
def test_env_id_format_is_enforced(bad):
    with pytest.raises(ValueError, match="namespace/name-vN"):
        EnvSpec(id=bad)


def test_env_id_parts():
    assert parse_env_id("math/arithmetic-v12") == ("math", "arithmetic", 12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_turns": 0}, "max_turns"),
        ({"reward_range": (1.0, 0.0)}, "reward_range"),
        ({"roles": ("a", "a")}, "roles"),
        ({"observation_type": "image"}, "observation_type"),
        ({"metadata": {"x": object()}}, "JSON|serializable"),
    ],
)
def test_env_spec_rejects_bad_fields(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        EnvSpec(id="t/x-v0", **kwargs)


def test_env_spec_from_dict_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown field"):
        EnvSpec.from_dict({"id": "t/x-v0", "max_turn": 3})


class Coin(TextEnv):
    env_spec = EnvSpec(id="t/coin-v0")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.side = "heads" if self.np_random.random() < 0.5 else "tails"
        return "Guess heads or tails.", {}

    def step(self, action):
        return "", float(action.strip() == self.side), True, False, {"side": self.side}


def test_text_env_is_a_gymnasium_env_seeded_through_np_random():
    import gymnasium

    env = Coin()
    assert isinstance(env, gymnasium.Env)
    sides = []
    for _ in range(2):
        env.reset(seed=123)
        sides.append([env.side] + [env.reset()[0] and env.side for _ in range(5)])
    assert sides[0] == sides[1]
    assert env.observation_space.contains("any text") and env.action_space.contains("x")


class Duel(MultiAgentTextEnv):
    """Two roles; "win" ends the game for the mover, anything else passes the turn (-0.1)."""

    env_spec = EnvSpec(id="test/duel-v0", description="", max_turns=4, reward_range=(-1.0, 1.0),
                       roles=("a", "b"))
    possible_agents = ["a", "b"]  # noqa: RUF012 - the AEC contract's class-level role list

    def reset(self, seed=None, options=None):
        super().reset(seed=seed, options=options)
        self.agent_selection = "a"
        self.refreshes = 0

    def observe(self, agent):
        self.check_role(agent)
        return f"{agent} to move: {self.agent_selection}"

    def step(self, action):
        role = self._begin_step()
        if action == "win":
            self._end(winner=role)
        else:
            self.rewards[role] = -0.1
            self.agent_selection = "b" if role == "a" else "a"
        self._end_step()

    def forfeit(self, role, reason="forfeit"):
        if self._begin_forfeit(role):
            self._end(winner="b" if role == "a" else "a")
            self._end_step()

    def _end(self, winner):
        for r in self.possible_agents:
            self.rewards[r] = 1.0 if r == winner else -1.0
            self.terminations[r] = True

    def _update_infos(self):
        self.refreshes += 1


def test_multi_agent_base_keeps_the_game_bookkeeping():
    env = Duel()
    env.reset(seed=0)
    env.step("pass")  # a: -0.1
    env.step("win")  # b wins: a -1, b +1
    assert env.done and env.refreshes == 2
    assert env._cumulative_rewards == pytest.approx({"a": -1.1, "b": 1.0})
    with pytest.raises(RuntimeError, match=r"Duel\.step: the game is over; call reset\(\)"):
        env.step("win")
    env.forfeit("a")  # over: a no-op, the totals stay
    assert env._cumulative_rewards == pytest.approx({"a": -1.1, "b": 1.0}) and env.refreshes == 2
    with pytest.raises(KeyError, match="unknown role 'c'; roles are a, b"):
        env.forfeit("c")
    with pytest.raises(KeyError, match="unknown role 'c'"):
        env.observe("c")


def test_multi_agent_forfeit_zeroes_the_step_then_ends_the_game():
    env = Duel()
    env.reset(seed=0)
    env.step("pass")  # a: -0.1 this step
    env.forfeit("b")  # this step's rewards restart from 0: a +1, b -1
    assert env.done and env.rewards == {"a": 1.0, "b": -1.0}
    assert env._cumulative_rewards == pytest.approx({"a": 0.9, "b": -1.0})
