"""Three tiny deterministic environments."""

from __future__ import annotations

from typing import Any

from tinker_core import EnvSpec, MultiAgentTextEnv, TextEnv

WORDS = ("apple", "river", "stone", "cloud", "tiger", "maple", "ember", "delta")

ECHO_SPEC = EnvSpec(
    id="echo/echo-v0",
    description="Repeat the word shown. Reward 1 for an exact echo, else 0.",
    max_turns=1,
    reward_range=(0.0, 1.0),
    action_format="the word, alone",
)
COUNTDOWN_SPEC = EnvSpec(
    id="echo/countdown-v0",
    description="Count down from N to 0, one number per turn. Reward 1 per correct number.",
    max_turns=10,
    reward_range=(0.0, 1.0),
    action_format="the next number",
)
CALL_RESPONSE_SPEC = EnvSpec(
    id="echo/call-response-v0",
    description="Two roles: the caller names a word, the responder must echo it.",
    max_turns=2,
    reward_range=(-1.0, 1.0),
    action_format="a word",
    roles=("caller", "responder"),
)


class EchoEnv(TextEnv):
    """Shows ``Say: <word>``; the episode ends after one action."""

    env_spec = ECHO_SPEC

    def __init__(self, words: tuple[str, ...] = WORDS) -> None:
        if not words:
            raise ValueError("EchoEnv: words must not be empty")
        self.words = tuple(words)
        self.word = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.word = self.words[int(self.np_random.integers(len(self.words)))]
        return f"Say: {self.word}\n", {"target": self.word}

    def step(self, action: str):
        reward = 1.0 if action.strip() == self.word else 0.0
        return "", reward, True, False, {"target": self.word}


class CountdownEnv(TextEnv):
    """Starts at N (seeded, 2..max_start); each turn the policy says the next number down."""

    env_spec = COUNTDOWN_SPEC

    def __init__(self, max_start: int = 5) -> None:
        if not 1 <= max_start <= COUNTDOWN_SPEC.max_turns:
            raise ValueError(f"CountdownEnv: max_start must be in 1..{COUNTDOWN_SPEC.max_turns}, got {max_start}")
        self.max_start = max_start
        self.current = 0
        self.turns = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.current = int(self.np_random.integers(1, self.max_start + 1))
        self.turns = 0
        return f"Count down from {self.current}.\n{self.current}\n", {"start": self.current}

    def step(self, action: str):
        self.turns += 1
        expected = self.current - 1
        ok = action.strip() == str(expected)
        reward = 1.0 if ok else 0.0
        if ok:
            self.current = expected
        terminated = (not ok) or expected == 0
        truncated = not terminated and self.turns >= self.env_spec.max_turns
        obs = "" if terminated else f"{self.current}\n"
        return obs, reward, terminated, truncated, {"expected": expected}


class CallResponseEnv(MultiAgentTextEnv):
    """Caller says any word from the list; responder scores 1 for echoing it, -1 otherwise."""

    env_spec = CALL_RESPONSE_SPEC

    def __init__(self) -> None:
        self.possible_agents = list(CALL_RESPONSE_SPEC.roles)
        self.call = ""

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        super().reset(seed=seed, options=options)
        self.agent_selection = "caller"
        self.hint = WORDS[int(self.np_random.integers(len(WORDS)))]
        self.call = ""

    def observe(self, agent: str) -> str:
        if agent == "caller":
            return f"Call a word (suggestion: {self.hint}):\n"
        return f"Echo: {self.call}\n"

    def step(self, action: str) -> None:
        self.rewards = {a: 0.0 for a in self.possible_agents}
        if self.agent_selection == "caller":
            self.call = action.strip()
            self.agent_selection = "responder"
        else:
            ok = action.strip() == self.call and self.call != ""
            self.rewards = {"caller": 1.0 if ok else 0.0, "responder": 1.0 if ok else -1.0}
            self.terminations = {a: True for a in self.possible_agents}
        self._accumulate_rewards()
