"""games/negotiation-v0: command parsing, invalid proposals, the turn limit, scoring against
hand-computed cases, determinism, splits, the scripted negotiators and the SFT set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tinker_core import play_episode, scripted_opponents
from tinker_env_games.negotiation import NEGOTIATION_SPEC, NegotiationEnv
from tinker_env_games.negotiation_rules import (
    Scenario,
    deal_scores,
    draw_scenario,
    parse_command,
    parse_items,
    scenario_split,
)
from tinker_env_games.negotiation_sft import main as sft_main
from tinker_env_games.negotiation_sft import scripted_dialogues
from tinker_env_games.negotiators import BoulwareAgent, ConcederAgent, RandomNegotiator, parse_view

# pot: 2 books, 1 hat, 3 balls; alice values 2/3/1 (4+3+3 = 10), bob 0/4/2 (0+4+6 = 10)
SCENARIO = Scenario((2, 1, 3), {"alice": (2, 3, 1), "bob": (0, 4, 2)})


def game(**kwargs: object) -> NegotiationEnv:
    env = NegotiationEnv(**kwargs)  # type: ignore[arg-type]
    env.reset(seed=0, options={"scenario": SCENARIO.to_dict()})
    return env


# ---- parsing --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "kind", "items"),
    [
        ("PROPOSE book=1 hat=0 ball=2", "propose", (1, 0, 2)),
        ("propose: books: 2, balls: 1", "propose", (2, 0, 1)),
        ("Offer 1 book and 3 balls, you keep the hat", "propose", (1, 0, 3)),
        ("**PROPOSE** hat 1", "propose", (0, 1, 0)),
        ("I think this is fair.\nPROPOSE book=2 hat=1 ball=0\nPROPOSE book=0", "propose", (2, 1, 0)),
        ("ACCEPT", "accept", None),
        ("  [accept] deal!", "accept", None),
        ("WALK AWAY", "walk-away", None),
        ("walk-away", "walk-away", None),
        ("No deal, sorry", "walk-away", None),
        ("I won't accept that, propose something better", "talk", None),
        ("", "talk", None),
        ("acceptable?", "talk", None),
        ("PROPOSE book=1 hat=0 ball=2 and you get 3 balls", "propose", (1, 0, 2)),
        ("Propose: I take 1 book, you take 2 hats", "propose", (1, 0, 0)),
        ("PROPOSE 2 books, 1 hat and 0 balls. Fair?", "propose", (2, 1, 0)),
    ],
)
def test_parse_command(text: str, kind: str, items: tuple[int, ...] | None) -> None:
    cmd = parse_command(text)
    assert cmd.kind == kind and cmd.items == items
    assert "\n" not in cmd.text and len(cmd.text) <= 200


def test_parse_items_errors() -> None:
    assert isinstance(parse_items("nothing here"), str) and "names no item" in str(parse_items("x"))
    assert parse_items("book=1 books=2") == "names book twice (1 and 2)"
    assert parse_items("book=1 book=1") == (1, 0, 0)  # repeated but consistent


# ---- scoring --------------------------------------------------------------------------------
def test_deal_scores_hand_computed() -> None:
    # alice takes 2 books + 1 hat: 4 + 3 = 7 of 10; bob gets 3 balls: 6 of 10
    assert deal_scores(SCENARIO, "alice", (2, 1, 0)) == {"alice": 0.7, "bob": 0.6}
    # bob takes everything: alice 0, bob 1
    assert deal_scores(SCENARIO, "bob", (2, 1, 3)) == {"alice": 0.0, "bob": 1.0}
    with pytest.raises(ValueError, match="not a share"):
        deal_scores(SCENARIO, "alice", (3, 0, 0))


def test_a_deal_ends_the_game_with_the_rule_scores() -> None:
    env = game()
    env.step("PROPOSE book=2 hat=1 ball=0 you get all the balls")
    assert not env.done and env.agent_selection == "bob"
    obs = env.observe("bob")
    assert "alice said: PROPOSE book=2 hat=1 ball=0 you get all the balls" in obs
    assert "Offer from alice: you get book=0 hat=0 ball=3 (worth 6 to you)" in obs
    assert "Messages left: 7 of 8" in obs and "Reply with one line" in obs
    assert "Waiting for bob." in env.observe("alice")
    env.step("ACCEPT")
    assert env.done and env.terminations == {"alice": True, "bob": True}
    assert env.rewards == {"alice": 0.7, "bob": 0.6} == env._cumulative_rewards
    assert env.infos["alice"] == {
        "invalid_commands": 0,
        "outcome": "win",
        "reason": "deal",
        "deal": True,
        "score": 0.7,
        "allocation": [2, 1, 0],
        "values": [2, 3, 1],
    }
    assert env.infos["bob"]["outcome"] == "loss" and env.infos["bob"]["allocation"] == [0, 0, 3]
    assert "Game over: deal. You get book=0 hat=0 ball=3 (worth 6 to you)." in env.observe("bob")
    with pytest.raises(RuntimeError, match="game is over"):
        env.step("ACCEPT")


def test_the_latest_proposal_stands_and_counter_offers_are_accepted() -> None:
    env = game()
    env.step("PROPOSE book=2 hat=1 ball=3")  # alice wants everything
    env.step("PROPOSE hat=1 ball=3")  # bob counters: he takes the hat and the balls
    assert "Offer from bob: you get book=2 hat=0 ball=0 (worth 4 to you)" in env.observe("alice")
    env.step("ACCEPT")
    assert env.rewards == {"alice": 0.4, "bob": 1.0}
    assert env.infos["alice"]["outcome"] == "loss" and env.infos["bob"]["outcome"] == "win"


def test_walk_away_and_the_disagreement_payoff() -> None:
    env = game(no_deal_reward=0.25)
    env.step("PROPOSE book=1")
    env.step("WALK AWAY, this is silly")
    assert env.done and env.rewards == {"alice": 0.25, "bob": 0.25}
    assert env.infos["bob"]["reason"] == "walk-away" and env.infos["bob"]["deal"] is False
    assert env.infos["alice"]["outcome"] == env.infos["bob"]["outcome"] == "draw"
    assert "Game over: no deal (someone walked away)" in env.observe("alice")


# ---- invalid commands and the turn limit -------------------------------------------------------
@pytest.mark.parametrize(
    ("action", "error"),
    [
        ("PROPOSE book=3", "you asked for 3 book but the pot has 2"),
        ("PROPOSE everything", "the proposal names no item"),
        ("PROPOSE book=1 book=2", "the proposal names book twice (1 and 2)"),
        ("ACCEPT", "there is no offer from bob to accept"),
    ],
)
def test_invalid_commands_cost_the_penalty_and_a_message(action: str, error: str) -> None:
    env = game()
    env.step(action)
    assert not env.done and env.agent_selection == "bob" and env.offer is None
    assert env.rewards == {"alice": -0.05, "bob": 0.0}
    assert env.infos["alice"] == {"invalid_commands": 1, "messages_left": 7}
    env.step("hello")
    assert f"Your last command was invalid: {error}" in env.observe("alice")


def test_accepting_ones_own_offer_is_invalid() -> None:
    env = game(invalid_penalty=0.5)
    env.step("PROPOSE book=1")
    env.step("let me think")  # talk: the offer stands
    env.step("ACCEPT")
    assert not env.done and env.rewards["alice"] == -0.5
    assert env.offer == ("alice", (1, 0, 0))


def test_the_turn_limit_ends_with_no_deal() -> None:
    env = game(max_messages=3)
    assert env.env_spec.max_turns == 3 and NEGOTIATION_SPEC.max_turns == 8
    env.step("PROPOSE book=1")
    env.step("PROPOSE ball=3")
    assert "Messages left: 1 of 3" in env.observe("alice")
    env.step("PROPOSE book=2 hat=1")  # the last message: a proposal nobody can answer
    assert env.done and env.infos["alice"]["reason"] == "turn-limit"
    assert env.rewards == {"alice": 0.0, "bob": 0.0}
    assert "no messages left" in env.observe("bob")


def test_forfeit_costs_the_offender() -> None:
    env = game(no_deal_reward=0.1)
    env.step("PROPOSE book=1")
    env.forfeit("bob", "forfeit-timeout")
    assert env.done and env.rewards == {"alice": 0.1, "bob": -1.0}
    assert env.infos["bob"]["outcome"] == "loss" and env.infos["bob"]["reason"] == "forfeit-timeout"
    env.forfeit("alice")  # no-op once over
    assert env._cumulative_rewards == {"alice": 0.1, "bob": -1.0}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_messages": 0},
        {"invalid_penalty": 2.0},
        {"no_deal_reward": -0.1},
        {"split": "dev"},
        {"first_mover": "carol"},
    ],
)
def test_bad_kwargs_name_the_argument(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        NegotiationEnv(**kwargs)  # type: ignore[arg-type]


def test_bob_opens_when_first_mover_says_so_and_the_scores_follow_the_same_rule() -> None:
    env = game(first_mover="bob")
    assert env.agent_selection == "bob" and "Reply with one line" in env.observe("bob")
    assert "Waiting for bob." in env.observe("alice")
    env.step("PROPOSE hat=1 ball=3")  # bob opens: the hat and the balls (4 + 6 = 10 to him)
    assert "Offer from bob: you get book=2 hat=0 ball=0 (worth 4 to you)" in env.observe("alice")
    env.step("ACCEPT")
    assert env.done and env.rewards == {"alice": 0.4, "bob": 1.0}


def test_a_random_first_mover_follows_the_seed_and_leaves_the_scenario_unchanged() -> None:
    fixed, drawn = NegotiationEnv(), NegotiationEnv(first_mover="random")
    openers = []
    for seed in range(40):
        fixed.reset(seed=seed)
        drawn.reset(seed=seed)
        assert drawn.scenario == fixed.scenario  # drawn after the scenario: same pot and values
        openers.append(drawn.agent_selection)
        drawn.reset(seed=seed)
        assert drawn.agent_selection == openers[-1]
    assert 10 <= openers.count("bob") <= 30 and set(openers) == {"alice", "bob"}


# ---- scenarios, determinism, splits -----------------------------------------------------------
def test_scenarios_follow_the_rules_and_the_seed() -> None:
    for seed in range(50):
        s = draw_scenario(np.random.default_rng(seed), "all")
        assert all(1 <= c <= 4 for c in s.counts) and 5 <= sum(s.counts) <= 7
        for r in ("alice", "bob"):
            assert sum(v * c for v, c in zip(s.values[r], s.counts, strict=True)) == 10
        assert s.values["alice"] != s.values["bob"]
        assert all(a + b > 0 for a, b in zip(s.values["alice"], s.values["bob"], strict=True))
        assert s == draw_scenario(np.random.default_rng(seed), "all")
    a, b = NegotiationEnv(), NegotiationEnv()
    for seed in range(5):
        a.reset(seed=seed)
        b.reset(seed=seed)
        assert a.scenario == b.scenario and a.observe("alice") == b.observe("alice")


def test_splits_are_disjoint_and_about_one_in_ten() -> None:
    rng = np.random.default_rng(0)
    tests = [scenario_split(draw_scenario(rng, "all")) == "test" for _ in range(2000)]
    assert 0.05 < np.mean(tests) < 0.15
    for split in ("train", "test"):
        env = NegotiationEnv(split=split)
        for seed in range(20):
            env.reset(seed=seed)
            assert scenario_split(env.scenario) == split


def test_same_seed_same_scripted_game() -> None:
    env = NegotiationEnv()
    runs = [
        play_episode(env, {"alice": ConcederAgent(seed=1), "bob": RandomNegotiator(seed=2)}, seed=7)
        for _ in range(2)
    ]
    assert runs[0].transcripts == runs[1].transcripts and runs[0].rewards == runs[1].rewards


# ---- scripted negotiators ---------------------------------------------------------------------
def test_the_env_offers_its_negotiators() -> None:
    assert scripted_opponents(NegotiationEnv) == {
        "random": RandomNegotiator,
        "conceder": ConcederAgent,
        "boulware": BoulwareAgent,
    }


def test_parse_view_reads_the_observation() -> None:
    env = game()
    env.step("PROPOSE book=2 hat=1 ball=0")
    view = parse_view(env.observe("bob"))
    assert view is not None
    assert (view.role, view.other, view.counts, view.values) == ("bob", "alice", (2, 1, 3), (0, 4, 2))
    assert view.offer == (0, 0, 3) and view.offer_by_other
    assert (view.messages_left, view.max_messages) == (7, 8)
    assert parse_view("Tic-tac-toe. You play X.") is None


def test_conceder_opens_high_accepts_what_it_aspires_to_and_concedes() -> None:
    env = game()
    agent = ConcederAgent()
    first = agent("alice", env.observe("alice"))
    assert first == "PROPOSE book=2 hat=1 ball=3"  # aspiration 10 of 10 at the start
    env.step(first)
    env.step("PROPOSE hat=1 ball=3")  # alice would get 2 books: worth 4
    # after 2 of 8 messages the aspiration is 10 - 5 * sqrt(2/8) = 7.5: 4 is not enough
    assert agent.aspiration(parse_view(env.observe("alice"))) == pytest.approx(7.5)  # type: ignore[arg-type]
    counter = agent("alice", env.observe("alice"))
    assert counter == "PROPOSE book=2 hat=1 ball=1"  # worth 8, the least above 7.5, fewest items
    env.step(counter)
    env.step("PROPOSE book=0 hat=0 ball=0 take it all")  # alice would get everything
    assert agent("alice", env.observe("alice")) == "ACCEPT"


def test_conceder_accepts_anything_on_the_last_message_and_walks_away_from_nothing() -> None:
    env = game(max_messages=2)
    env.step("PROPOSE book=2 hat=1 ball=2")
    assert ConcederAgent()("bob", env.observe("bob")) == "ACCEPT"  # 1 ball: worth 2 > 0
    env = game(max_messages=2)
    env.step("PROPOSE book=0 hat=1 ball=3")  # bob would get 2 books: worth 0 to him
    assert ConcederAgent()("bob", env.observe("bob")) == "WALK AWAY"


def test_rule_based_negotiators_reach_deals() -> None:
    env = NegotiationEnv()
    deals = {}
    for pair in (("conceder", "conceder"), ("boulware", "conceder"), ("random", "random")):
        results = [
            play_episode(
                env,
                {r: NegotiationEnv.scripted_opponents[n](seed=2 * s + k) for k, (r, n) in enumerate(zip(("alice", "bob"), pair, strict=True))},
                seed=s,
            )
            for s in range(60)
        ]
        deals[pair] = np.mean([res.reason == "deal" for res in results])
        assert all(res.reason in ("deal", "walk-away", "turn-limit") for res in results)
    assert deals[("conceder", "conceder")] > 0.9 and deals[("boulware", "conceder")] > 0.8


# ---- the SFT set ------------------------------------------------------------------------------
def test_scripted_dialogues_are_trajectory_prefixes_of_deals(tmp_path: Path) -> None:
    records = scripted_dialogues(6, seed=3)
    assert records == scripted_dialogues(6, seed=3)
    assert records and {r["role"] for r in records} == {"alice", "bob"}
    for rec in records:
        assert rec["completion"].endswith("\n") and rec["prompt"].startswith("Negotiation. You are")
        cmd = parse_command(rec["completion"])
        assert cmd.kind in ("propose", "accept", "walk-away")
    by_game: dict[tuple[int, str], list[dict]] = {}
    for rec in records:
        by_game.setdefault((rec["episode"], rec["role"]), []).append(rec)
    for turns in by_game.values():
        for a, b in zip(turns, turns[1:], strict=False):
            assert b["prompt"].startswith(a["prompt"] + a["completion"])
    last = {ep: turns[-1] for (ep, _), turns in by_game.items()}
    assert any(rec["completion"] == "ACCEPT\n" for rec in last.values())
    out = tmp_path / "sft.jsonl"
    assert sft_main([str(out), "--episodes", "6", "--seed", "3"]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == records
    # --format messages: the same deals, a conversation per player and game, each reply a command
    conversations = scripted_dialogues(6, seed=3, messages=True)
    assert sft_main([str(out), "--episodes", "6", "--seed", "3", "--format", "messages"]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == conversations
    assert {(c["episode"], c["role"]) for c in conversations} == set(by_game)
    for conv in conversations:
        replies = [m["content"] for m in conv["messages"] if m["role"] == "assistant"]
        assert [r + "\n" for r in replies] == [rec["completion"] for rec in by_game[(conv["episode"], conv["role"])]]
    with pytest.raises(ValueError, match="unknown scripted opponent"):
        scripted_dialogues(1, policies=("conceder", "minimax"))


def test_scripted_dialogues_with_a_random_opener_teach_both_seats_to_open(tmp_path: Path) -> None:
    records = scripted_dialogues(12, seed=3, env_kwargs={"first_mover": "random"})
    openers = {r["role"] for r in records if " said: " not in r["prompt"]}  # a move before any message
    assert openers == {"alice", "bob"}
    out = tmp_path / "sft.jsonl"
    assert sft_main([str(out), "--episodes", "12", "--seed", "3", "--first-mover", "random"]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == records


def test_brief_observations_drop_the_instructions_and_still_parse() -> None:
    env = game(brief=True)
    env.step("PROPOSE book=2 hat=1 ball=0")
    assert env.observe("bob") == (
        "Negotiation. You are bob; alice is the other player.\n"
        "Pot: book=2 hat=1 ball=3\n"
        "Your values: book=0 hat=4 ball=2\n"
        "alice said: PROPOSE book=2 hat=1 ball=0\n"
        "Offer from alice: you get book=0 hat=0 ball=3 (worth 6 to you)\n"
        "Messages left: 7 of 8\n"
    )
    view = parse_view(env.observe("bob"))
    assert view is not None and view.values == (0, 4, 2) and view.offer == (0, 0, 3)
    # aspiration after 1 of 8 messages: 10 - 5 * sqrt(1/8) = 8.23; the offer (6) is below it
    # and hat + 2 balls (8) too, so bob asks for hat + 3 balls (10)
    assert ConcederAgent()("bob", env.observe("bob")) == "PROPOSE book=0 hat=1 ball=3"
