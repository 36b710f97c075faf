"""games/guess-number-v0: feedback, shaped reward, truncation, seeding."""

from __future__ import annotations

import pytest

from tinker_env_games.guess_number import GUESS_NUMBER_SPEC, GuessNumberEnv, success_reward


def _binary_search(env: GuessNumberEnv, seed: int) -> tuple[int, float]:
    env.reset(seed=seed)
    lo, hi = env.low, env.high
    while True:
        guess = (lo + hi) // 2
        obs, reward, terminated, truncated, info = env.step(f"My guess is {guess}.")
        if terminated or truncated:
            return info["turn"], reward
        if obs == "higher\n":
            lo = guess + 1
        else:
            assert obs == "lower\n"
            hi = guess - 1


def test_seeding() -> None:
    env = GuessNumberEnv()
    draws = []
    for s in range(30):
        env.reset(seed=s)
        draws.append(env.secret)
    again = []
    for s in range(30):
        env.reset(seed=s)
        again.append(env.secret)
    assert draws == again and len(set(draws)) > 10
    assert all(1 <= d <= 100 for d in draws)


def test_binary_search_always_wins_with_shaped_reward() -> None:
    env = GuessNumberEnv()
    for seed in range(100):
        turns, reward = _binary_search(env, seed)
        assert turns <= 7
        assert reward == pytest.approx(1 - (turns - 1) / 8)


def test_feedback_and_reward_values() -> None:
    env = GuessNumberEnv(low=1, high=10, max_turns=4)
    obs, info = env.reset(options={"secret": 7})
    assert obs == "Guess my number between 1 and 10.\n"
    assert env.step("5")[:4] == ("higher\n", 0.0, False, False)
    assert env.step("9")[:4] == ("lower\n", 0.0, False, False)
    obs, reward, terminated, truncated, info = env.step("7")
    assert (obs, reward, terminated, truncated) == ("correct\n", 0.5, True, False)
    assert info["secret"] == 7
    assert success_reward(1, 4) == 1.0 and success_reward(4, 4) == 0.25


def test_invalid_guess_uses_a_turn_and_truncation() -> None:
    env = GuessNumberEnv(low=1, high=10, max_turns=2)
    assert env.env_spec.max_turns == 2 and GUESS_NUMBER_SPEC.max_turns == 8
    env.reset(options={"secret": 3})
    obs, reward, terminated, truncated, info = env.step("no idea")
    assert obs == "invalid: reply with a whole number from 1 to 10\n"
    assert (reward, terminated, truncated, info["event"]) == (0.0, False, False, "invalid")
    obs, reward, terminated, truncated, info = env.step("50")  # out of range: still feedback
    assert (obs, reward, terminated, truncated) == ("lower\n", 0.0, False, True)
    assert info["secret"] == 3
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("3")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"low": 5, "high": 4}, "low must be <= high"), ({"max_turns": 0}, "max_turns")],
)
def test_bad_kwargs(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GuessNumberEnv(**kwargs)
