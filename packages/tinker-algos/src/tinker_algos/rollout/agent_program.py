"""Agent-program episodes: train the agent you already have (env id ``agent/program-v0``).

An agent program is a function ``run(task, client) -> reward`` that talks to an LLM through the
``openai`` client it is given, in whatever loop, with whatever tools and memory it likes::

    env:
      id: agent/program-v0
      kwargs: {entry: "my_agent:run", tasks: "my_agent:TASKS", timeout_s: 60}

Each step, every task (``rollout.prompts_per_step`` of them, task ``p`` being
``tasks[seed_p % len(tasks)]``) is run by ``rollout.group_size`` episodes at once, each in its own
thread with its own ``openai.OpenAI`` client pointed at the job's rollout proxy (tinker-serve's
``openai`` proxy, found through the ``opentinker_register_rollout_proxies`` hook) with the
episode's key as its API key (a random secret the proxy issues per episode and revokes when the
episode ends). The proxy serves the current policy and records every call's token
ids and logprobs; :func:`tinker_algos.rollout.agent_calls.merge_calls` turns an episode's calls into
trajectories that train exactly like env rollouts (prompt, tool and user tokens masked, sampled
tokens trained as sampled), as one :class:`~tinker_algos.rollout.RolloutResult`.

``run`` returns the reward: a number, a bool, or a dict with a ``"reward"`` key; or anything,
scored by ``reward: "module:fn"`` as ``fn(task, result) -> float``. An episode fails, with its
reason counted under ``rollout/errors/<reason>`` and left out of training, when its agent raises
(``agent_error``), runs past ``timeout_s`` (``agent_timeout``; its later calls are refused),
returns no reward (``agent_bad_result``), made no call (``agent_no_calls``) or ended its process
(``agent_crash``: with ``isolation: process``, naming the exit code or signal; in thread mode, an
``os._exit`` call, :mod:`tinker_algos.rollout.agent_threads`); the job fails only
above ``rollout.max_error_rate``. Held-out evaluation runs ``eval_size`` episodes over the eval
tasks (``eval_kwargs.tasks``) with greedy sampling. Metrics besides the rollout's:
``agent/calls_mean`` (calls per finished episode) and ``agent/segments_rewritten`` (segments
started by a call that did not extend the episode's context; each segment is a row of its group).

``demo: "module:fn"`` gives the program's demonstrations, ``fn(task, messages) -> reply`` (text,
or an OpenAI assistant message with ``tool_calls``): an ``sft`` stage without data then trains on
the program's own episodes with the proxy answering each call with the demonstrated reply
(:func:`agent_demonstrations`), so the warm start's prompts are the agent's calls token for token.
Held-out evaluation with ``algorithm.eval_temperature`` plays the eval tasks a second time, sampled.

``entry``, ``tasks``, ``reward`` and ``demo`` are imported with the working directory (and ``path``, when
given) on ``sys.path``; in a scheduler's job, only if its operator allowed them
(``--allow-import``), from its installed packages alone (:mod:`tinker_core.import_policy`).
``isolation: process`` runs each episode in a child process instead of a thread, so that an
agent that kills its process fails its episode, not the job, and every process it started is
killed when the episode ends (:mod:`tinker_algos.rollout.agent_isolation`). Left out, ``isolation`` is
``process`` in a scheduler's job and ``thread`` elsewhere
(:func:`tinker_core.agent_program.default_isolation`).

Any env whose registered spec says ``agent_program=True`` is played the same way: it is a
:class:`tinker_core.AgentProgram` (tinker-core's contract), of which :class:`AgentProgramEnv` is
one; the ``verifiers/...`` envs of tinker-env-adapters are others, registered by their own
package, which this module never imports.
"""

from __future__ import annotations

import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tinker_algos.records.recording import phase, record_eval
from tinker_algos.rollout.agent_calls import (
    AGENT_PROGRAM_SPEC,
    ProxyCall,
    segment_trajectory,
    split_segments,
    transcript,
)
from tinker_algos.rollout.agent_isolation import ISOLATION_MODES, ProcessPlay, load_ref
from tinker_algos.rollout.agent_threads import AgentExit, agent_thread, guarded
from tinker_algos.rollout.episodes import Episode, RolloutError, RolloutResult
from tinker_core.agent_program import AgentProgram, default_isolation
from tinker_core.errors import ConfigError

if TYPE_CHECKING:
    from tinker_algos.model.models import PolicyModel
    from tinker_algos.model.prompts import PromptRenderer
    from tinker_algos.sampling.sampler import SamplingParams

AGENT_ENV_ID = AGENT_PROGRAM_SPEC.id
SPEC = AGENT_PROGRAM_SPEC
INSTALL_HINT = "install tinker-serve with the openai client: pip install 'tinker-serve' openai (or uv sync --all-packages)"


class AgentProgramEnv(AgentProgram):
    """The ``agent/program-v0`` env: the agent program, its tasks and limits (the module docstring).

    Its episodes are played by :func:`agent_rollout`, not by ``step``: ``reset`` shows the task,
    ``step`` refuses with a message saying so (:class:`tinker_core.AgentProgram`)."""

    def __init__(
        self, entry: str, tasks: Sequence[Any] | str, timeout_s: float = 120.0, reward: str | None = None,
        path: str | None = None, proxy: str = "openai", isolation: str | None = None, demo: str | None = None,
    ) -> None:
        super().__init__()
        self.env_spec = SPEC
        isolation = default_isolation(entry) if isolation is None else isolation
        if isolation not in ISOLATION_MODES:
            raise ConfigError([f"env.kwargs.isolation: {isolation!r} is not one of {', '.join(ISOLATION_MODES)}; "
                               "'process' runs each episode in a child process (an agent that kills its process "
                               "fails its episode, not the job)"])
        #: ``thread`` or ``process``: where each episode's ``run`` runs (:mod:`tinker_algos.rollout.agent_isolation`);
        #: left out, ``process`` in a scheduler's job and ``thread`` elsewhere (:func:`tinker_core.agent_program.default_isolation`)
        self.isolation = isolation
        self.entry, self.path = entry, path
        self.run: Callable[..., Any] = load_ref(entry, "entry", path)
        if not callable(self.run):
            raise ConfigError([f"env.kwargs.entry: {entry!r} is not callable; name a function run(task, client)"])
        self.tasks = _task_list(tasks, path)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
            raise ConfigError([f"env.kwargs.timeout_s: must be a number of seconds > 0, got {timeout_s!r}"])
        self.timeout_s = float(timeout_s)
        self.reward_fn = load_ref(reward, "reward", path) if reward else None
        self.demo_fn: Callable[..., Any] | None = load_ref(demo, "demo", path) if demo else None
        if self.demo_fn is not None and not callable(self.demo_fn):
            raise ConfigError([f"env.kwargs.demo: {demo!r} is not callable; name a function demo(task, messages)"])
        self.proxy = proxy

    @property
    def demonstrations(self) -> bool:
        """Whether ``demo`` was given (an SFT stage on this env needs it)."""
        return self.demo_fn is not None

    def demonstrate(self, task: Any, messages: list[dict[str, Any]]) -> str | dict[str, Any]:
        """``demo(task, messages)``: the reply to train on (:meth:`tinker_core.AgentProgram.demonstrate`)."""
        if self.demo_fn is None:
            raise ConfigError(["env.kwargs.demo: not set; name a function demo(task, messages) returning the reply to train on"])
        return self.demo_fn(task, messages)

    def score(self, task: Any, result: Any) -> float:
        """The reward of ``run``'s ``result``, through ``reward`` when given (ValueError when it is none)."""
        if self.reward_fn is not None:
            result = self.reward_fn(task, result)
        try:
            return super().score(task, result)
        except ValueError as e:
            raise ValueError(f"{e}, or set env.kwargs.reward to a scoring function") from None


def _task_list(tasks: Any, path: str | None) -> list[Any]:
    """``env.kwargs.tasks`` as a non-empty list: a list, or ``'module:TASKS'`` naming a sequence or
    a function returning one (a ConfigError naming the field otherwise)."""
    loaded = load_ref(tasks, "tasks", path) if isinstance(tasks, str) else tasks
    try:
        if callable(loaded):
            loaded = loaded()
        if isinstance(loaded, str | bytes | dict) or not isinstance(loaded, Sequence | list | tuple):
            raise TypeError(f"{type(loaded).__name__} is not a list")
        out = list(loaded)
    except Exception as e:  # noqa: BLE001 - anything that is not a list of tasks
        raise ConfigError([f"env.kwargs.tasks: {tasks!r} gives no list of tasks ({type(e).__name__}: {e}); give a list or "
                           "'module:TASKS'"]) from None
    if not out:
        raise ConfigError(["env.kwargs.tasks: no tasks; give a non-empty list or 'module:TASKS'"])
    return out


def is_agent_program(env_cfg: Any) -> bool:
    """Whether a stage's ``env`` section runs agent programs: ``agent/program-v0`` or any env whose
    registered spec says ``agent_program`` (:class:`tinker_core.AgentProgram`), not served from an
    address."""
    env_id = getattr(env_cfg, "id", None)
    if env_cfg is None or not env_id or getattr(env_cfg, "address", None):
        return False
    if env_id == AGENT_ENV_ID:
        return True
    from tinker_core.registry import env_spec, get_registry

    return env_id in get_registry("envs") and env_spec(env_id).agent_program


@dataclass
class _Play:
    """One agent episode while it runs."""

    group: int
    task: Any
    #: it seeds the proxy's sampling of each call (with the job's seed for the step), so it is
    #: derived from the episode's place in the rollout; it is not a credential
    episode_id: str
    #: what its client sends as the API key: the proxy's random key for this episode
    key: str = ""
    result: Any = None
    #: what the agent raised (thread mode) or its text (process mode)
    error: BaseException | str | None = None
    finished: bool = False
    #: the failure counted when ``error`` is set: ``agent_error``, ``agent_crash`` (its process died)
    #: or ``agent_bad_result`` (a result a child process could not send back)
    reason: str = "agent_error"


def _play(program: AgentProgram, play: _Play, base_url: str) -> None:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=play.key, max_retries=0, timeout=program.timeout_s)
    try:
        with agent_thread():
            play.result = program.run(play.task, client)
    except AgentExit as e:  # os._exit in thread mode: the episode's crash, not the job's end
        play.error, play.reason = str(e), "agent_crash"
    except BaseException as e:  # noqa: BLE001 - an agent's failure is its episode's, never the job's
        play.error = e
    finally:
        play.finished = True
        client.close()


def _run_threads(program: AgentProgram, plays: list[_Play], base_url: str) -> None:
    """Play each episode in a thread of this process until the timeout (``isolation: thread``)."""
    threads = [threading.Thread(target=_play, args=(program, p, base_url), name=f"agent-{i}", daemon=True)
               for i, p in enumerate(plays)]
    with guarded():  # os._exit and os.chdir of an agent thread (tinker_algos.rollout.agent_threads)
        for t in threads:
            t.start()
        deadline = time.monotonic() + program.timeout_s
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


def _run_processes(program: AgentProgram, plays: list[_Play], base_url: str) -> None:
    """Play each episode in a child process until the timeout, then kill what still runs
    (``isolation: process``; :class:`~tinker_algos.rollout.agent_isolation.ProcessPlay`)."""
    with tempfile.TemporaryDirectory(prefix="agents-") as tmp:
        children = [ProcessPlay(program.entry, program.path, p.task, p.key, base_url, program.timeout_s,
                                Path(tmp) / f"{i}.json") for i, p in enumerate(plays)]
        deadline = time.monotonic() + program.timeout_s
        try:
            for child in children:
                child.start()
            for child in children:
                child.wait(deadline - time.monotonic())
        finally:
            for child in children:
                if child.proc is not None:
                    child.stop()
        for p, child in zip(plays, children, strict=True):
            p.finished, p.result, reason, detail = child.outcome()
            if reason is not None:
                p.error, p.reason = detail, reason


def _open_demonstrated(proxy: Any, program: AgentProgram, play: _Play) -> str:
    """Open ``play``'s episode answered with the program's demonstrations; a ConfigError when the
    program's rollout proxy does not take them."""
    try:
        return str(proxy.open_episode(play.episode_id, demonstrate=partial(program.demonstrate, play.task)))
    except TypeError as e:
        raise ConfigError([f"env: the rollout proxy {program.proxy!r} takes no demonstrations ({e}); an sft stage on an agent "
                           "program needs one whose open_episode takes demonstrate= (tinker-serve's 'openai')"]) from None


def proxy_starter(program: AgentProgram) -> Callable[..., Any]:
    """The ``start`` of the program's rollout proxy (hook ``opentinker_register_rollout_proxies``);
    a ConfigError naming the install fix when it, or the openai client, is missing."""
    from tinker_core.errors import UnknownNameError
    from tinker_core.registry import get_rollout_proxy

    try:
        import openai  # noqa: F401 - the agents' client
        return get_rollout_proxy(program.proxy).obj
    except (ImportError, UnknownNameError) as e:
        raise ConfigError([f"env: {program.env_spec.id} needs the rollout proxy {program.proxy!r} and the openai client ({e}); "
                           f"{INSTALL_HINT}"]) from e


def _episodes(program: AgentProgram, play: _Play, calls: list[ProxyCall], tokenizer: Any, top: float) -> tuple[list[Episode], str | None]:
    """The episode's rows (one per segment), or ``([failed], reason)``."""
    reason, detail = None, ""
    reward = 0.0
    if not play.finished:
        reason = "agent_timeout"
    elif play.error is not None:
        reason = play.reason
        detail = play.error if isinstance(play.error, str) else "".join(traceback.format_exception_only(play.error)).strip()
    elif not calls:
        reason = "agent_no_calls"
    else:
        try:
            reward = program.score(play.task, play.result)
        except Exception as e:  # noqa: BLE001 - a bad result fails the episode
            reason, detail = "agent_bad_result", f"{type(e).__name__}: {e}"
    if reason is not None:
        texts = transcript(calls, tokenizer.decode)
        return [AgentEpisode(None, 0.0, len(calls), False, reason, texts, group=play.group, calls=len(calls), detail=detail)], reason
    out: list[Episode] = []
    for n, seg in enumerate(split_segments(calls)):
        traj = segment_trajectory(seg, reward, play.group, episode_id=play.episode_id, segment=n)
        out.append(AgentEpisode(traj, reward, len(seg), reward >= top - 1e-9, None, transcript(seg, tokenizer.decode),
                                truncated=seg[-1].finish_reason == "length", group=play.group, calls=len(calls), segment=n))
    return out, None


@dataclass(frozen=True)
class AgentEpisode(Episode):
    """An agent episode's row: the :class:`~tinker_core.episodes.Episode` of one segment, with the
    number of calls, the segment's index and, for a failed episode, the error's text."""

    calls: int = 0
    segment: int = 0
    detail: str = ""


@dataclass
class AgentRolloutResult(RolloutResult):
    """The rollout of agent episodes: :class:`RolloutResult` plus the ``agent/*`` metrics."""

    failures: list[str] = field(default_factory=list)

    def metrics(self, prefix: str = "env") -> dict[str, float]:
        firsts = [e for e in self.episodes if not isinstance(e, AgentEpisode) or e.segment == 0]
        out = RolloutResult(firsts, self.errors, self.new_tokens, self.seconds).metrics(prefix)  # one row per episode
        ok = [e for e in firsts if isinstance(e, AgentEpisode) and e.error is None]
        out["agent/calls_mean"] = float(np.mean([e.calls for e in ok])) if ok else 0.0
        out["agent/segments_rewritten"] = float(sum(1 for e in self.episodes if isinstance(e, AgentEpisode) and e.segment > 0))
        return out


def agent_rollout(
    policy: PolicyModel, program: AgentProgram, seeds: Sequence[int], params: SamplingParams, *, group_size: int = 1,
    renderer: PromptRenderer | None = None, adapter: str | None = None, max_error_rate: float = 1.0,
    max_context_tokens: int | None = None, tasks: Sequence[Any] | None = None, demonstrate: bool = False,
) -> AgentRolloutResult:
    """Run ``group_size`` agent episodes per task seed (or per task of ``tasks``) through the
    rollout proxy; their trajectories as a :class:`RolloutResult` (the module docstring).
    ``demonstrate``: the proxy answers each call with the program's
    :meth:`~tinker_core.AgentProgram.demonstrate` reply instead of a sample (an SFT warm start)."""
    from tinker_algos.model.prompts import PromptRenderer

    t0 = time.perf_counter()
    renderer = renderer or PromptRenderer.from_config(policy.tokenizer, "auto")
    start = proxy_starter(program)
    chosen = list(tasks) if tasks is not None else [program.task(s) for s in seeds]
    plays = [_Play(g, task, f"ep-{g}-{k}") for g, task in enumerate(chosen) for k in range(group_size)]
    with start(policy, renderer, params, adapter=adapter, max_context_tokens=max_context_tokens) as proxy, phase("agents"):
        for p in plays:
            p.key = _open_demonstrated(proxy, program, p) if demonstrate else proxy.open_episode(p.episode_id)
        if program.isolation == "process":
            _run_processes(program, plays, proxy.base_url)
        else:
            _run_threads(program, plays, proxy.base_url)
        recorded = [proxy.close_episode(p.episode_id) for p in plays]  # later calls are refused (401)
    top = float(program.env_spec.reward_range[1])
    episodes: list[Episode] = []
    errors: Counter[str] = Counter()
    failures: list[str] = []
    for p, calls in zip(plays, recorded, strict=True):
        rows, reason = _episodes(program, p, calls, policy.tokenizer, top)
        episodes += rows
        if reason is not None:
            errors[reason] += 1
            failures.append(f"{reason}: {getattr(rows[0], 'detail', '')}".rstrip(": "))
    new_tokens = sum(len(c.completion_ids) for calls in recorded for c in calls)
    if sum(errors.values()) / max(len(plays), 1) > max_error_rate:
        raise RolloutError(f"{sum(errors.values())} of {len(plays)} agent episodes failed ({dict(errors)}; first: "
                           f"{failures[0]}), above rollout.max_error_rate={max_error_rate}; fix the agent or raise the limit")
    return AgentRolloutResult(episodes, errors, new_tokens, time.perf_counter() - t0, failures)


def stage_program(ctx: Any, *, evaluation: bool = False) -> AgentProgram:
    """The stage's agent program (its eval kwargs' for ``evaluation``); ``ctx`` is the stage's
    :class:`~tinker_algos.algorithms.base.StageContext` (which calls this module)."""
    factory = (ctx.eval_env_factory or ctx.env_factory) if evaluation else ctx.require_env()
    program = factory()
    if not isinstance(program, AgentProgram):
        raise ConfigError([f"env: {ctx.stage.env.id} built a {type(program).__name__}, not a tinker_core.AgentProgram"])
    if program.isolation == "process" and not program.entry:
        raise ConfigError([f"env: {program.env_spec.id} runs its episodes in this process only (it has no importable "
                           "entry); drop isolation: process"])
    return program


def stage_agent_rollout(ctx: Any, step: int, policy: PolicyModel | None = None) -> AgentRolloutResult:
    """A training step's agent episodes (:meth:`StageContext.group_rollout` for ``agent/program-v0``)."""
    r = ctx.rollout_cfg
    return agent_rollout(
        policy or ctx.policy, stage_program(ctx), ctx.task_seeds(step), replace(ctx.sampling_params(step), stop=()),
        group_size=r.group_size, renderer=ctx.renderer, adapter=ctx.adapter, max_error_rate=r.max_error_rate,
    )


def agent_demonstrations(ctx: Any, seeds: Sequence[int]) -> AgentRolloutResult:
    """An SFT step's examples from the stage's agent program: one episode per seed's task, run
    against the rollout proxy answering every call with the program's demonstration
    (:meth:`tinker_core.AgentProgram.demonstrate`), so each trajectory holds the prompts exactly as
    the agent's calls render and the demonstrated replies as trained tokens. A ConfigError when
    the program gives no demonstrations."""
    from tinker_algos.sampling.sampler import SamplingParams

    program = stage_program(ctx)
    if not program.demonstrations:
        raise ConfigError([f"{ctx.where}: sft on the agent program {ctx.stage.env.id!r} needs its demonstrations: set "
                           "env.kwargs.demo to 'module:demo', a function demo(task, messages) returning the reply to "
                           "train on (text, or an OpenAI assistant message with tool_calls), or give algorithm.data"])
    params = SamplingParams(max_new_tokens=ctx.rollout_cfg.max_new_tokens, temperature=0.0)
    return agent_rollout(ctx.policy, program, seeds, params, renderer=ctx.renderer, adapter=ctx.adapter,
                         max_error_rate=ctx.rollout_cfg.max_error_rate, demonstrate=True)


def evaluate_agents(ctx: Any, num_episodes: int, seed: int, temperature: float = 0.0) -> dict[str, float]:
    """Held-out evaluation: ``num_episodes`` episodes over the eval tasks, in order; greedy, or
    sampled at ``temperature`` (seeded by ``seed``)."""
    from tinker_algos.sampling.sampler import SamplingParams

    program = stage_program(ctx, evaluation=True)
    params = SamplingParams(max_new_tokens=ctx.rollout_cfg.max_new_tokens, temperature=temperature, seed=seed)
    tasks = [program.task(i) for i in range(num_episodes)]
    result = agent_rollout(ctx.policy, program, [], params, renderer=ctx.renderer, adapter=ctx.adapter, tasks=tasks)
    record_eval(result, ctx.policy.tokenizer)
    m = result.metrics(prefix="eval")
    return {"eval/accuracy": m["eval/success_rate"], "eval/reward_mean": m["eval/reward_mean"],
            "eval/turns_mean": m["eval/turns_mean"], "eval/error_rate": m["rollout/error_rate"]}


__all__ = [
    "AGENT_ENV_ID", "AgentEpisode", "AgentProgramEnv", "AgentRolloutResult", "agent_demonstrations", "agent_rollout", "evaluate_agents",
    "is_agent_program", "proxy_starter", "stage_agent_rollout",
]
