"""Prime Intellect's verifiers environments as OpenTinker agent programs: ``verifiers/env-v0``.

A verifiers environment (``pip install 'tinker-env-adapters[verifiers]'``, the classic stack of
verifiers 0.3: ``SingleTurnEnv``, ``MultiTurnEnv``, ``ToolEnv`` with a ``Rubric``) is a module
with ``load_environment(**kwargs)``. It is not stepped with text: it drives the rollout itself,
calling the policy through an OpenAI-compatible client, then scores it with its rubric. So it maps
onto OpenTinker's agent programs (:class:`tinker_core.AgentProgram`), not onto ``step``:

- the tasks are the rows of the environment's dataset (``split="eval"``: its eval dataset);
- an episode is verifiers' own rollout of one row (``env.run_rollout``), its client an
  ``AsyncOpenAI`` pointed at the job's rollout proxy with the episode's key as its API key, so every
  call the environment makes is served by the policy and recorded token-exactly;
- the reward is the rubric's score of that rollout; a rollout verifiers ended with an error
  (``state["error"]``) fails the episode, as an agent that raises does.

The rollouts of one :class:`VerifiersEnv` run on one event loop of their own (a daemon thread), as
verifiers runs them, whichever trainer thread asks.

What cannot map is an :class:`~tinker_env_adapters.AdapterError` when the env is built, naming the
env and the piece: a module that cannot be imported or has no ``load_environment``; a
``load_environment`` that fails (e.g. it downloads a dataset and there is no network); a rubric
that calls a judge model (``JudgeRubric``: the judge is not the policy, and the proxy does not
serve it; ``allow_judge=True`` lets it call its own endpoint); a rubric scoring rollouts as a
group, or an environment that needs group rollouts (each episode is scored alone); an environment
with no dataset rows.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any

from tinker_core import AgentProgram, EnvSpec, check_import, import_folders
from tinker_env_adapters._common import AdapterError, adapter_spec, require

__all__ = ["ENV_ID", "VerifiersEnv", "verifiers_spec"]

ENV_ID = "verifiers/env-v0"
EXTRA = "verifiers"
MODEL_NAME = "policy"
"""The ``model`` verifiers sends; the rollout proxy serves the job's policy whatever it is called."""
_NETWORK_ERRORS = ("ConnectionError", "ConnectError", "OfflineModeIsEnabled", "LocalEntryNotFoundError",
                   "HfHubHTTPError", "MaxRetryError", "NameResolutionError", "gaierror", "URLError", "DatasetNotFoundError")


def verifiers_spec() -> EnvSpec:
    """The registered spec of ``verifiers/env-v0`` (an agent program: ``agent_program=True``)."""
    return adapter_spec(
        ENV_ID, "verifiers",
        "A verifiers environment (a module with load_environment): each episode is its own rollout of one dataset "
        "row, the policy called through the rollout proxy; the reward is its rubric's score (kwargs: environment "
        "'module-name', env_args {...load_environment kwargs}, split train | eval, path, timeout_s, allow_judge)",
        about={"extra": EXTRA},
        max_turns=1, reward_range=(0.0, 1.0), agent_program=True, import_kwargs=("environment",),
    )


def _module_name(environment: str) -> str:
    """verifiers' own rule: ``vf-math-python`` and ``org/math-python`` load the module ``math_python``."""
    return environment.replace("-", "_").split("/")[-1]


def _rubrics(rubric: Any) -> Iterator[Any]:
    """A rubric and, for a ``RubricGroup``, every rubric inside it."""
    yield rubric
    for inner in getattr(rubric, "rubrics", None) or ():
        yield from _rubrics(inner)


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


class VerifiersEnv(AgentProgram):
    """The env ``verifiers/env-v0``: a verifiers environment played as an agent program.

    Args:
        environment: the environment's module (``"my_env"``; ``-`` read as ``_``, as verifiers
            does), imported with the working directory and ``path`` on ``sys.path``.
        env_args: ``load_environment``'s keyword arguments.
        split: ``"train"`` (the dataset) or ``"eval"`` (the eval dataset, else the dataset).
        path: a folder put on ``sys.path`` before importing ``environment``.
        timeout_s: the most seconds one episode may run (the client's HTTP timeout too).
        allow_judge: let a ``JudgeRubric`` call its own judge endpoint instead of refusing it.
        sampling_args: merged over the environment's own ``sampling_args`` (the rollout proxy
            samples with the job's temperature and caps the tokens whatever they say).
        max_tasks: use only the first ``max_tasks`` rows (None: all).
        reward_range: the rubric's lowest and highest score (default ``[0, 1]``); an episode
            reaching the highest counts as a success (``eval/accuracy``).
    """

    def __init__(
        self, environment: str, env_args: Mapping[str, Any] | None = None, split: str = "train", path: str | None = None,
        timeout_s: float = 120.0, allow_judge: bool = False, sampling_args: Mapping[str, Any] | None = None,
        max_tasks: int | None = None, reward_range: tuple[float, float] | list[float] = (0.0, 1.0),
    ) -> None:
        super().__init__()
        self.env_spec = replace(verifiers_spec(), reward_range=tuple(reward_range))
        self.environment = str(environment)
        where = f"env {ENV_ID!r} (verifiers environment {self.environment!r})"
        if split not in ("train", "eval"):
            raise AdapterError(f"{where}: split must be 'train' or 'eval', got {split!r}")
        if not timeout_s > 0:
            raise AdapterError(f"{where}: timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.timeout_s, self.path = float(timeout_s), path
        vf = require("verifiers", ENV_ID, EXTRA)
        self.vf_env = self._load(vf, where, dict(env_args or {}))
        self._check(vf, where, allow_judge)
        rows = self._rows(where, split)
        self.tasks = rows[:max_tasks] if max_tasks else rows
        self.sampling_args = {**dict(getattr(self.vf_env, "sampling_args", None) or {}), **dict(sampling_args or {})}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _load(self, vf: Any, where: str, env_args: dict[str, Any]) -> Any:
        name = _module_name(self.environment)
        check_import(f"{name}:load_environment", "env.kwargs.environment")  # on a scheduler: only what it allows
        added = [p for p in import_folders(self.path) if p not in sys.path]
        sys.path[:0] = added
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            if e.name and name.startswith(e.name):
                raise AdapterError(
                    f"{where}: no module {name!r} can be imported; install the environment's package (e.g. "
                    "'prime env install <owner>/<name>' or pip) or set kwargs.path to the folder holding it"
                ) from e
            raise AdapterError(f"{where}: importing {name!r} failed: it needs {e.name!r} ({e}); install that package") from e
        finally:
            for p in added:
                sys.path.remove(p)
        load = getattr(module, "load_environment", None)
        if not callable(load):
            raise AdapterError(f"{where}: module {name!r} has no load_environment(**kwargs); a verifiers environment "
                               "module defines one that returns a vf.Environment")
        unknown = self._unknown_args(load, env_args)
        if unknown:
            raise AdapterError(f"{where}: load_environment takes no argument(s) {unknown}; its parameters are "
                               f"{list(inspect.signature(load).parameters)}")
        try:
            env = load(**env_args)
        except Exception as e:  # noqa: BLE001 - whatever load_environment raises becomes one clear error
            raise AdapterError(f"{where}: load_environment({self._args(env_args)}) failed: {self._why(e)}") from e
        if not isinstance(env, vf.Environment):
            raise AdapterError(f"{where}: load_environment returned a {type(env).__name__}, not a vf.Environment "
                               "(the classic verifiers stack, verifiers>=0.3,<0.4)")
        return env

    @staticmethod
    def _unknown_args(load: Any, env_args: dict[str, Any]) -> list[str]:
        params = inspect.signature(load).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return []
        return sorted(set(env_args) - {p.name for p in params})

    @staticmethod
    def _args(env_args: dict[str, Any]) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in env_args.items())

    @staticmethod
    def _why(e: BaseException) -> str:
        text = f"{type(e).__name__}: {e}"
        names = {type(x).__name__ for x in _chain(e)}
        if names & set(_NETWORK_ERRORS) or "offline" in str(e).lower():
            return (f"{text}; it downloads something at start-up (a dataset from the Hugging Face Hub?) and there is no "
                    "network: run it once with network so the dataset is cached (then HF_DATASETS_OFFLINE=1), or give "
                    "it a local dataset")
        if "api_key" in str(e) and "OPENAI_API_KEY" in str(e):
            return (f"{text}; it builds an OpenAI client of its own at start-up (a judge model?), which this adapter "
                    "does not serve: the rollout proxy serves only the policy")
        return text

    def _check(self, vf: Any, where: str, allow_judge: bool) -> None:
        env = self.vf_env
        for rubric in _rubrics(env.rubric):
            if isinstance(rubric, vf.JudgeRubric) and not allow_judge:
                raise AdapterError(
                    f"{where}: its rubric {type(rubric).__name__} asks a judge model ({rubric.judge_model!r} at "
                    f"{getattr(rubric.judge_client, 'base_url', '?')}) to score each rollout; the rollout proxy serves "
                    "only the policy, so there is no judge here. Use a rubric of plain reward functions, or set "
                    "kwargs.allow_judge: true to let the judge call its own endpoint (its calls are not trained)"
                )
            group = getattr(rubric, "_get_group_reward_funcs", lambda: [])()
            if group:
                raise AdapterError(
                    f"{where}: its rubric scores rollouts as a group ({', '.join(f.__name__ for f in group)}); "
                    "OpenTinker scores each episode alone (its GRPO groups the rewards afterwards): use per-rollout "
                    "reward functions"
                )
        if getattr(env, "requires_group_rollouts", False) or getattr(env, "provides_advantages", False):
            raise AdapterError(f"{where}: {type(env).__name__} needs group rollouts or gives its own advantages; "
                               "OpenTinker plays and scores each episode alone")

    def _rows(self, where: str, split: str) -> list[dict[str, Any]]:
        try:
            dataset = self.vf_env.get_eval_dataset() if split == "eval" else self.vf_env.get_dataset()
        except Exception as e:  # noqa: BLE001 - a dataset builder's failure is the env's, named
            raise AdapterError(f"{where}: building its {split} dataset failed: {self._why(e)}") from e
        rows = [dict(row) for row in dataset]
        if not rows:
            raise AdapterError(f"{where}: its {split} dataset has no rows")
        return rows

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Show a task: the content of its prompt's last message (``info["task"]`` is the row)."""
        _, info = super().reset(seed=seed, options=options)
        prompt = info["task"].get("prompt")
        last = prompt[-1] if isinstance(prompt, list) and prompt else prompt
        return str(last.get("content", "") if isinstance(last, dict) else last), info

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name=f"verifiers-{self.environment}", daemon=True).start()
                self._loop = loop
            return self._loop

    def run(self, task: Any, client: Any) -> dict[str, Any]:
        """verifiers' rollout of ``task`` (a dataset row) with ``client``'s endpoint and key; the
        rubric's reward (RuntimeError when verifiers ended the rollout with an error)."""
        future = asyncio.run_coroutine_threadsafe(self._rollout(task, str(client.base_url), client.api_key),
                                                  self._event_loop())
        try:
            out = future.result(self.timeout_s + 5.0)
        except FutureTimeout:
            future.cancel()
            raise
        error = out.get("error")
        if error:
            raise RuntimeError(f"verifiers ended the rollout of {self.environment!r} with an error: {error}")
        return {"reward": float(out.get("reward") or 0.0), "metrics": dict(out.get("metrics") or {})}

    async def _rollout(self, task: dict[str, Any], base_url: str, api_key: str) -> Any:
        import openai
        from verifiers.clients import OpenAIChatCompletionsClient

        native = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=self.timeout_s)
        try:
            return await self.vf_env.run_rollout(task, OpenAIChatCompletionsClient(native), MODEL_NAME,
                                                 dict(self.sampling_args))
        finally:
            await native.close()

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        super().close()
