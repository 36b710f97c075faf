"""games/reference-v0: the shared reward, the word budget, invalid guesses, determinism,
splits, and the scripted partners."""

from __future__ import annotations

import pytest

from tinker_core import play_episode, scripted_opponents
from tinker_env_games.reference_game import (
    LiteralPartner,
    RandomPartner,
    ReferenceGameEnv,
    distinguishing_description,
    filter_message,
    scenario_split,
)

OBJECTS = [
    ("big", "blue", "square"),
    ("small", "red", "circle"),
    ("big", "red", "circle"),
    ("small", "green", "star"),
]
OPTIONS = {"objects": OBJECTS, "target": 2, "order": [1, 2, 0, 3]}  # the listener's order


def game(**kwargs: int) -> ReferenceGameEnv:
    env = ReferenceGameEnv(**kwargs)
    env.reset(seed=0, options=OPTIONS)
    return env


def test_observations() -> None:
    env = game()
    assert env.observe("speaker") == (
        "Reference game. You are the speaker. The listener sees these objects in another order:\n"
        "- big blue square\n- small red circle\n- big red circle\n- small green star\n"
        "Target: big red circle\nDescribe the target to the listener in at most 2 word(s).\n"
    )
    assert env.observe("listener").endswith("Waiting for the speaker.\n")
    env.step("Big, RED!! (the 3rd one)")
    assert env.observe("listener") == (
        "Reference game. You are the listener. Objects:\n"
        "1. small red circle\n2. big red circle\n3. big blue square\n4. small green star\n"
        'The speaker says: "big red"\n'
        "Reply with the number of the object the speaker means (1-4).\n"
    )


@pytest.mark.parametrize(
    ("guess", "reward", "reason"),
    [("2", 1.0, "correct"), ("I think 1", 0.0, "wrong"), ("5", 0.0, "invalid-guess"), ("two", 0.0, "invalid-guess")],
)
def test_both_roles_share_the_reward(guess: str, reward: float, reason: str) -> None:
    env = game()
    env.step("big red")
    env.step(guess)
    assert env.done and env.rewards == {"speaker": reward, "listener": reward} == env._cumulative_rewards
    outcome = "win" if reward else "loss"
    for role in ("speaker", "listener"):
        assert env.infos[role]["outcome"] == outcome and env.infos[role]["reason"] == reason
        assert env.infos[role]["target"] == "big red circle"
    assert "Game over: the listener picked" in env.observe("speaker")
    with pytest.raises(RuntimeError, match="game is over"):
        env.step("1")


def test_the_word_budget_and_digits() -> None:
    assert filter_message("Big red circle please", 2) == "big red"
    assert filter_message("the 3rd: 3", 2) == "the rd"
    env = game(max_words=1)
    env.step("big red circle")
    assert 'The speaker says: "big"' in env.observe("listener")


def test_forfeit_fails_the_game_for_both() -> None:
    env = game()
    env.forfeit("speaker", "forfeit-timeout")
    assert env.done and env.rewards == {"speaker": 0.0, "listener": 0.0}
    assert env.infos["listener"]["reason"] == "forfeit-timeout"


def test_distinguishing_description() -> None:
    assert distinguishing_description(OBJECTS[2], OBJECTS, 2) == "big red"
    assert distinguishing_description(OBJECTS[3], OBJECTS, 2) == "green"
    assert distinguishing_description(OBJECTS[1], OBJECTS, 1) is None  # small, red, circle: all shared


@pytest.mark.parametrize("kwargs", [{"num_objects": 1}, {"max_words": 0}, {"split": "dev"}])
def test_bad_kwargs_name_the_argument(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ReferenceGameEnv(**kwargs)  # type: ignore[arg-type]


def test_scenarios_are_seeded_describable_and_in_their_split() -> None:
    for split in ("train", "test"):
        a, b = ReferenceGameEnv(split=split, max_words=1), ReferenceGameEnv(split=split, max_words=1)
        for seed in range(15):
            a.reset(seed=seed)
            b.reset(seed=seed)
            assert (a.objects, a.target, a.order) == (b.objects, b.target, b.order)
            assert len(set(a.objects)) == 4 and sorted(a.order) == [0, 1, 2, 3]
            assert distinguishing_description(a.objects[a.target], a.objects, 1) is not None
            assert scenario_split(a.objects, a.target) == split


def test_partners() -> None:
    assert scripted_opponents("games/reference-v0") == {"literal": LiteralPartner, "random": RandomPartner}
    env = game()
    assert LiteralPartner()("speaker", env.observe("speaker")) == "big red"
    env.step("red circle")  # fits both red circles: the literal listener takes the lowest number
    assert LiteralPartner()("listener", env.observe("listener")) == "1"
    env = ReferenceGameEnv()
    wins = [
        play_episode(env, {"speaker": LiteralPartner(), "listener": LiteralPartner(seed=s)}, seed=s).rewards["speaker"]
        for s in range(50)
    ]
    assert wins == [1.0] * 50  # the literal speaker's words fit only the target
    random_listener = [
        play_episode(env, {"speaker": LiteralPartner(), "listener": RandomPartner(seed=s)}, seed=s).rewards["listener"]
        for s in range(100)
    ]
    assert 0.1 < sum(random_listener) / 100 < 0.45
