"""OpenEnv environments as OpenTinker envs, against the real openenv-core: an ``Environment``
subclass written as an OpenEnv author writes one, run in process (``openenv/env-v0``) and served by
OpenEnv's own FastAPI app (``openenv/remote-v0`` over its WebSocket sessions); the conformance kit
over both, and the same episodes either way."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("openenv.core", reason="needs tinker-env-adapters[openenv]")

import uvicorn  # noqa: E402
from openenv.core import Action, Environment, Observation, State  # noqa: E402
from openenv.core.env_server.http_server import create_fastapi_app  # noqa: E402
from pydantic import Field  # noqa: E402

import tinker_core  # noqa: E402
from tinker_core import check_env  # noqa: E402
from tinker_core.http_limits import serve_in_thread  # noqa: E402
from tinker_env_adapters import AdapterError  # noqa: E402
from tinker_env_adapters.openenv_env import OpenEnvEnv, OpenEnvRemoteEnv  # noqa: E402


class ReverseAction(Action):
    word: str = Field(..., description="The reversed word.")


class ReverseObservation(Observation):
    text: str = ""
    attempts_left: int = 0


class ReverseEnvironment(Environment[ReverseAction, ReverseObservation, State]):
    """Reverse a seeded word; two attempts; reward 1 for the right answer, 0.25 for the right
    first letter on the last attempt."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    WORDS = ("otter", "lumen", "cobalt", "prism", "quartz")

    def __init__(self, attempts: int = 2) -> None:
        super().__init__()
        self.attempts = attempts
        self._state = State(episode_id=None, step_count=0)
        self.word = ""
        self.left = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ReverseObservation:
        self.word = self.WORDS[(seed or 0) % len(self.WORDS)]
        self.left = self.attempts
        self._state = State(episode_id=episode_id, step_count=0)
        return ReverseObservation(text=f"Reverse the word: {self.word}", attempts_left=self.left, metadata={"word": self.word})

    def step(self, action: ReverseAction, timeout_s: float | None = None, **kwargs: Any) -> ReverseObservation:
        self._state.step_count += 1
        self.left -= 1
        if action.word.strip() == self.word[::-1]:
            return ReverseObservation(text="Correct.", done=True, reward=1.0)
        if self.left == 0:
            partial = 0.25 if action.word.strip()[:1] == self.word[-1] else 0.0
            return ReverseObservation(text="Out of attempts.", done=True, reward=partial)
        return ReverseObservation(text=f"No. Try again ({self.left} left).", attempts_left=self.left, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


ENV = f"{__name__}:ReverseEnvironment"


@contextlib.contextmanager
def served() -> Iterator[str]:
    app = create_fastapi_app(ReverseEnvironment, ReverseAction, ReverseObservation, max_concurrent_envs=8)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    with serve_in_thread(server, "openenv-test", "the OpenEnv test server") as port:
        yield f"http://127.0.0.1:{port}"


def play(env: tinker_core.TextEnv, seed: int, replies: list[str]) -> list[tuple[Any, ...]]:
    obs, info = env.reset(seed=seed)
    out: list[tuple[Any, ...]] = [(obs, info.get("word"))]
    for reply in replies:
        obs, reward, terminated, truncated, _ = env.step(reply)
        out.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return out


def test_an_environment_class_plays_in_process_through_the_registry(adapters_only):
    env = tinker_core.make_env("openenv/env-v0", environment=ENV)
    assert play(env, 1, ["abc", "nemul"]) == [
        ("Reverse the word: lumen", "lumen"), ("No. Try again (1 left).", 0.0, False, False), ("", 1.0, True, False),
    ]
    assert play(env, 0, ["x", "rottx"]) == [  # last attempt: the right first letter earns 0.25
        ("Reverse the word: otter", "otter"), ("No. Try again (1 left).", 0.0, False, False), ("", 0.25, True, False),
    ]
    check_env(lambda: tinker_core.make_env("openenv/env-v0", environment=ENV), actions=["abc", "rotto"])


def test_a_served_environment_plays_the_same_episodes_remotely(adapters_only):
    local = OpenEnvEnv(ReverseEnvironment)
    with served() as url:
        remote = tinker_core.make_env("openenv/remote-v0", url=url)
        try:
            for seed, replies in ((1, ["abc", "nemul"]), (3, ["msirp"]), (4, ["q", "z"])):
                got = play(remote, seed, replies)
                want = play(local, seed, replies)
                assert [g[1:] for g in got[1:]] == [w[1:] for w in want[1:]]  # rewards and ends
                assert got[0][0] == want[0][0] and [g[0] for g in got[1:]] == [w[0] for w in want[1:]]
            check_env(lambda: OpenEnvRemoteEnv(url), actions=["abc", "rotto"])
        finally:
            remote.close()


def test_turns_are_capped_and_bad_kwargs_name_the_fix(adapters_only):
    env = OpenEnvEnv(ENV, env_kwargs={"attempts": 5}, max_turns=2)
    assert play(env, 2, ["a", "b", "c"])[-1] == ("", 0.0, False, True)  # truncated after 2 steps
    with pytest.raises(AdapterError, match="is not an OpenEnv Environment"):
        OpenEnvEnv("collections:OrderedDict")
    with pytest.raises(AdapterError, match="package.module:Name"):
        OpenEnvEnv("ReverseEnvironment")
    with pytest.raises(AdapterError, match="action_field 'text' is not a field"):
        OpenEnvEnv(ENV, action_field="text")
    with pytest.raises(AdapterError, match="max_turns"):
        OpenEnvEnv(ENV, max_turns=0)
    with pytest.raises(AdapterError, match="url must be"):
        OpenEnvRemoteEnv("localhost:1")
    with pytest.raises(AdapterError, match="is the OpenEnv server running"):
        OpenEnvRemoteEnv("http://127.0.0.1:9", timeout_s=2)


def test_an_action_without_one_text_field_asks_for_action_field(adapters_only):
    class TwoFields(Action):
        a: str = ""
        b: str = ""

    class TwoRequired(Action):
        a: str
        b: str

    class TwoEnv(ReverseEnvironment):
        pass

    with pytest.raises(AdapterError, match="pass action_field"):
        OpenEnvEnv(TwoEnv, action=TwoFields)
    with pytest.raises(AdapterError, match="also requires b"):
        OpenEnvEnv(TwoEnv, action=TwoRequired, action_field="a")
    env = OpenEnvEnv(TwoEnv, action=TwoFields, action_field="a", observation_field="attempts_left")
    obs, _ = env.reset(seed=0)
    assert obs == "2"
    # the env reads action.word, which TwoFields lacks: the episode ends with the error, not a crash
    obs, reward, terminated, _, info = env.step("rettor")
    assert (obs, reward, terminated) == ("", 0.0, True) and "AttributeError" in info["error"]


def test_on_a_scheduler_only_the_classes_its_operator_allowed_are_imported(adapters_only):
    with tinker_core.enforced(tinker_core.ImportPolicy(("json:*",))):  # what a scheduler's worker enforces
        with pytest.raises(tinker_core.ImportRefused, match=r"^env.kwargs.environment: 'collections:OrderedDict' is not code"):
            OpenEnvEnv("collections:OrderedDict")
        with pytest.raises(tinker_core.ImportRefused, match=r"^env.kwargs.action: 'collections:OrderedDict' is not code"):
            OpenEnvEnv(ReverseEnvironment, action="collections:OrderedDict")
        with pytest.raises(AdapterError, match="is not an OpenEnv Environment"):  # allowed: imported, then checked
            OpenEnvEnv("json:JSONDecoder")
    assert tinker_core.env_spec("openenv/env-v0").import_kwargs == ("environment", "action")
    assert tinker_core.env_spec("openenv/remote-v0").import_kwargs == ()
