"""Agent programs: envs played by a program ``run(task, client) -> reward``, not by ``step``.

Most envs are stepped with text. An agent program is the other shape: a function that takes one
task and an ``openai.OpenAI`` client and talks to the policy through it, in whatever loop, with
whatever tools, then returns its reward. The trainer (tinker-algos) runs it against the job's
rollout proxy (hook ``opentinker_register_rollout_proxies``), which serves the policy and records
every call's token ids and logprobs, so the episode trains like any env rollout.

This module is the contract between a package that *provides* such envs and the trainer that
*plays* them, so that neither imports the other:

* the env class subclasses :class:`AgentProgram` and implements :meth:`AgentProgram.run`;
* its registered :class:`~tinker_core.env.EnvSpec` says ``agent_program=True`` (the trainer reads
  the spec from the registry before it builds the env);
* the trainer draws tasks with :meth:`AgentProgram.task`, runs ``run`` for each episode (in a
  thread of its own, at most ``timeout_s`` seconds) and scores the result with
  :meth:`AgentProgram.score`.

``agent/program-v0`` (tinker-algos: ``run`` named by ``entry: "module:run"``) and the
``verifiers/...`` envs of tinker-env-adapters are both agent programs. Only a program with an
importable ``entry`` can run each episode in a child process (``isolation: process``); that is
the default for such a program in a scheduler's job (:func:`default_isolation`), where one
agent must not be able to end, or change the working directory of, the job that trains it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from tinker_core.env import TextEnv
from tinker_core.import_policy import policy_enforced

__all__ = ["ISOLATION_MODES", "AgentProgram", "default_isolation"]

ISOLATION_MODES = ("thread", "process")
"""Where an episode's ``run`` runs: a thread of the trainer, or a child process (``entry`` only)."""


def default_isolation(entry: str | None) -> str:
    """``isolation`` when a config leaves it out: ``process`` for a program with an importable
    ``entry`` in a scheduler's job (a scheduler's policy is enforced,
    :func:`tinker_core.import_policy.policy_enforced`), else ``thread`` (``opentinker train`` on
    your own machine, the Python API: no start-up cost per episode)."""
    return "process" if entry and policy_enforced() else "thread"


class AgentProgram(TextEnv):
    """An env played by its program through the rollout proxy (the module docstring).

    Subclasses set ``env_spec`` (with ``agent_program=True``) and ``tasks`` (non-empty) and
    implement :meth:`run`; they may override :meth:`score`. ``reset`` shows a task (for previews
    and ``check_env``); ``step`` refuses, since the program plays the episode.

    Attributes:
        tasks: what an episode is about: any values ``run`` understands (JSON ones travel to a
            child process with ``isolation: process``).
        timeout_s: the most seconds one episode may run; also the client's HTTP timeout.
        isolation: ``"thread"`` or ``"process"`` (needs ``entry``).
        entry: ``"module:function"``, a ``run(task, client)`` a child process can import; None
            when the program only runs in the trainer's process.
        path: a folder put on ``sys.path`` before importing ``entry`` in a child process.
        proxy: the name of the rollout proxy that serves the policy (``openai``: tinker-serve's).
    """

    tasks: Sequence[Any] = ()
    timeout_s: float = 120.0
    isolation: str = "thread"
    entry: str | None = None
    path: str | None = None
    proxy: str = "openai"

    def run(self, task: Any, client: Any) -> Any:
        """Play one episode of ``task`` with ``client`` (an ``openai.OpenAI`` pointed at the proxy,
        the episode's key as its API key) and return what :meth:`score` turns into the reward."""
        raise NotImplementedError(f"{type(self).__name__} must implement run(task, client)")

    def score(self, task: Any, result: Any) -> float:
        """The reward of ``run``'s ``result``: a finite number, a bool, or a dict with a
        ``"reward"`` key (ValueError for anything else)."""
        if isinstance(result, dict) and "reward" in result:
            result = result["reward"]
        if isinstance(result, bool | numbers.Real) and math.isfinite(float(result)):
            return float(result)
        raise ValueError(f"the agent returned {type(result).__name__}, not a reward; return a number or "
                         "{'reward': number}")

    def demonstrate(self, task: Any, messages: list[dict[str, Any]]) -> str | dict[str, Any]:
        """The reply a good policy gives to ``messages`` (the call's OpenAI chat messages, as the
        agent sent them) in an episode of ``task``: what an SFT warm start on this env trains on
        (``algorithm.name: sft`` without ``data``). Either text (tool calls written in the default
        format, :func:`tinker_core.tools.format_tool_call`) or an OpenAI assistant message
        (``{"content": ..., "tool_calls": [...]}``), which the rollout proxy writes as the policy
        would. The trainer runs :meth:`run` against the proxy with these replies in place of
        samples, so the warm start's tokens are exactly those the agent's own calls render to.
        Implement it, or set :attr:`demonstrations`, to give demonstrations."""
        raise NotImplementedError(f"{type(self).__name__} gives no demonstrations; implement demonstrate(task, messages)")

    @property
    def demonstrations(self) -> bool:
        """Whether :meth:`demonstrate` is implemented (an SFT stage on this env needs it)."""
        return type(self).demonstrate is not AgentProgram.demonstrate

    def task(self, seed: int) -> Any:
        """The task of reset seed ``seed``: ``tasks[seed % len(tasks)]``."""
        return self.tasks[int(seed) % len(self.tasks)]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task = self.task(seed if seed is not None else int(self.np_random.integers(len(self.tasks))))
        return str(task), {"task": task}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        raise RuntimeError(f"{self.env_spec.id} is played by its agent program through the rollout proxy "
                           "(tinker_algos.rollout.agent_program.agent_rollout), not by step()")
