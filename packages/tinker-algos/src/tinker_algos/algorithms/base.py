"""What every algorithm gets (:class:`StageContext`) and provides (:class:`Algorithm`).

A job runs its stages in order; each stage builds its algorithm with a context holding the
policy, a trainer for this stage's optimizer, the environment factories and the seeds. The
training loop (:mod:`tinker_algos.run.job`) calls ``step(k)`` once per optimizer step and
``evaluate()`` on the held-out set; ``state_dict``/``load_state_dict`` carry the algorithm's own
state (a critic, a data cursor) through checkpoints, ``save_files``/``load_files`` the files it
writes there (one trainer checkpoint per role in multi-agent ``learners`` mode).

Randomness is derived from ``(seed, stage, step)`` (:meth:`StageContext.step_seed`), never drawn
from a long-lived generator, so a resumed run sees exactly the rollouts an uninterrupted one
would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tinker_algos.model.models import PolicyModel
from tinker_algos.rollout.section import (
    LIVE_SAMPLING,
    section_rollout_call,
    section_sampling_params,
)
from tinker_algos.training.trainer import Trainer
from tinker_core.config import JobConfig, StageConfig
from tinker_core.seeding import derive_seed

if TYPE_CHECKING:
    from tinker_algos.distributed.runtime import Runtime
    from tinker_algos.model.prompts import PromptRenderer
    from tinker_algos.rollout.episodes import RolloutResult
    from tinker_algos.sampling.sampler import SamplingParams


@dataclass
class StageContext:
    job: JobConfig
    stage: StageConfig
    stage_index: int
    policy: PolicyModel
    trainer: Trainer
    run_dir: Path
    adapter: str | None
    env_factory: Callable[[], Any] | None
    eval_env_factory: Callable[[], Any] | None
    log: Callable[[str], None]
    renderer: PromptRenderer | None = None  # a tinker_algos.model.prompts.PromptRenderer (model.chat_template); None = 'auto'
    runtime: Runtime | None = None  # the run's rollout workers and learners (execution); None: one process
    engine: Any = None  # the stage's rollout engine (rollout.engine, tinker_core.engines); None: hf on the policy
    plays_agent_program: bool = field(init=False)
    """Whether the stage's env runs agent programs (``agent/program-v0``), decided once here so a
    step does not look the env up again."""

    engine_follows_policy: bool = field(init=False)
    """Whether the engine samples with the policy's own model and records the weights' version
    itself (the ``hf`` engine in this process: :meth:`HFEngine.follow`), so a step needs no engine
    sync (:func:`tinker_algos.distributed.engine_sync.sync_engine` serves every other engine)."""

    sampling_template: SamplingParams = field(init=False)
    """The rollout section's sampling parameters, unseeded: read once here; a step seeds them and
    takes the live ones (:data:`~tinker_algos.rollout.section.LIVE_SAMPLING`) from the section."""

    section_rollout: Callable[..., RolloutResult] = field(init=False)
    """:func:`~tinker_algos.rollout.episodes.rollout` with the rollout section's settings bound
    (:func:`~tinker_algos.rollout.section.section_rollout_call`), read once here."""

    def __post_init__(self) -> None:
        from tinker_algos.rollout import agent_program

        self.plays_agent_program = agent_program.is_agent_program(self.stage.env)
        self.sampling_template = section_sampling_params(self.rollout_cfg, None)
        self.section_rollout = section_rollout_call(self.rollout_cfg)
        self.engine_follows_policy = bool(getattr(self.engine, "shares_policy", False)) and callable(getattr(self.engine, "follow", None))

    @property
    def algo(self) -> Any:
        return self.stage.algorithm

    @property
    def rollout_cfg(self) -> Any:
        return self.stage.rollout

    @property
    def where(self) -> str:
        """The config path of this stage's algorithm section, for error messages."""
        return "algorithm" if not self.job.stages else f"stages[{self.stage_index}].algorithm"

    def step_seed(self, step: int, *what: object) -> int:
        return derive_seed(self.job.seed, self.stage_index, step, *what)

    def sampling_params(self, step: int) -> SamplingParams:
        """The rollout section's sampling parameters, seeded for ``step``, with its live settings
        (``rollout.temperature``) as they are now."""
        r = self.rollout_cfg
        return replace(self.sampling_template, seed=self.step_seed(step, "sample"), **{k: getattr(r, k) for k in LIVE_SAMPLING})

    def task_seeds(self, step: int, refill: int = 0) -> list[int]:
        """The reset seeds of a step's ``rollout.prompts_per_step`` tasks, task ``p``'s derived from
        ``(seed, stage, step, p)``; those of dynamic sampling's refill round ``refill > 0`` from
        ``(seed, stage, step, "refill", refill, p)``."""
        if refill:
            return [self.step_seed(step, "refill", refill, p) for p in range(self.rollout_cfg.prompts_per_step)]
        return [self.step_seed(step, "task", p) for p in range(self.rollout_cfg.prompts_per_step)]

    def group_rollout(self, step: int, policy: PolicyModel | None = None, *, refill: int = 0, tasks: int | None = None) -> RolloutResult:
        """The step's single-agent episodes: ``rollout.group_size`` per task (see :meth:`task_seeds`),
        returned as one :class:`~tinker_core.TrajectoryGroup` per task (``result.groups``), sampled
        by ``policy`` (default: the stage's; a copy with older weights samples ahead). An
        ``agent/program-v0`` env runs agent programs instead (:mod:`tinker_algos.rollout.agent_program`).
        ``refill > 0``: dynamic sampling's refill round, fresh tasks with their own sampling seed
        (the first ``tasks`` of them)."""
        if self.plays_agent_program:
            from tinker_algos.rollout import agent_program

            return agent_program.stage_agent_rollout(self, step, policy)
        params = self.sampling_params(step)
        if refill:
            params = replace(params, seed=self.step_seed(step, "sample", "refill", refill))
        elif self.engine_follows_policy and policy is None:  # the engine samples with the weights after `step` updates
            self.engine.follow(step)
        elif self.engine is not None and policy is None:  # another process's engine: the adapter of `step` goes over
            from tinker_algos.distributed.engine_sync import sync_engine

            sync_engine(self.engine, self.policy, self.adapter, step, self.run_dir)
        return self.section_rollout(
            policy or self.policy,
            self.require_env(),
            self.task_seeds(step, refill)[:tasks],
            params,
            adapter=self.adapter,
            renderer=self.renderer,
            engine=self.engine if policy is None else None,  # a sample-ahead copy samples in-process
        )

    def require_env(self) -> Callable[[], Any]:
        if self.env_factory is None:
            from tinker_core.errors import ConfigError

            raise ConfigError([f"stages[{self.stage_index}]: algorithm {self.algo.name!r} needs an 'env'"])
        return self.env_factory


class Algorithm:
    """Base class: one optimizer step per :meth:`step`, held-out metrics from :meth:`evaluate`."""

    name: ClassVar[str] = ""

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self._has_roles: bool | None = None

    def step(self, step: int) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics; the default evaluates the env greedily when there is one: an env
        with roles through :func:`~tinker_algos.multiagent.grpo.evaluate_stage` (against the
        scripted opponent of :func:`~tinker_algos.multiagent.grpo.default_eval_opponent`), an
        agent program through :func:`~tinker_algos.rollout.agent_program.evaluate_agents`, any other env
        through :func:`~tinker_algos.rollout.evaluate`. With ``algorithm.eval_temperature`` a
        single-agent env or agent program is played a second time, sampled at that temperature:
        ``eval/sampled_accuracy`` and ``eval/sampled_reward_mean``."""
        factory = self.ctx.eval_env_factory or self.ctx.env_factory
        if factory is None:
            return {}
        if not self.ctx.plays_agent_program and self.env_has_roles():
            from tinker_algos.multiagent.grpo import evaluate_stage

            return evaluate_stage(self.ctx, None)
        out = self.evaluate_single(0.0)
        temperature = getattr(self.ctx.algo, "eval_temperature", None)
        if temperature:
            sampled = self.evaluate_single(float(temperature))
            out.update({"eval/sampled_accuracy": sampled["eval/accuracy"], "eval/sampled_reward_mean": sampled["eval/reward_mean"]})
        return out

    def evaluate_single(self, temperature: float) -> dict[str, float]:
        """One held-out evaluation of a single-agent env or agent program, greedy (``temperature``
        0) or sampled; the seed is the job's evaluation seed either way."""
        from tinker_algos.rollout import agent_program
        from tinker_algos.rollout.episodes import evaluate

        seed = derive_seed(self.ctx.job.seed, "eval")
        if self.ctx.plays_agent_program:
            return agent_program.evaluate_agents(self.ctx, self.ctx.algo.eval_size, seed, temperature=temperature)
        r = self.ctx.rollout_cfg
        return evaluate(
            self.ctx.policy,
            self.ctx.eval_env_factory or self.ctx.env_factory,
            self.ctx.algo.eval_size,
            seed=seed,
            max_new_tokens=r.max_new_tokens,
            stop=r.stop,
            max_turns=r.max_turns,
            adapter=self.ctx.adapter,
            renderer=self.ctx.renderer,
            reuse_kv_cache=r.reuse_kv_cache,
            temperature=temperature,
        )

    def env_has_roles(self) -> bool:
        """Whether the stage's env is multi-agent (its spec has roles; looked up once)."""
        known: bool | None = getattr(self, "_has_roles", None)  # a subclass may skip Algorithm.__init__
        if known is None:
            from tinker_algos.multiagent.grpo import stage_env_spec

            spec = stage_env_spec(self.ctx) if self.ctx.env_factory is not None else None
            known = self._has_roles = bool(spec is not None and spec.roles)
        return known

    def state_dict(self) -> dict[str, Any]:
        """Extra state to checkpoint (torch tensors allowed)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def save_files(self, checkpoint_dir: Path) -> None:
        """Write the algorithm's own checkpoint files into the run checkpoint ``checkpoint_dir``
        while it is written (its manifest then covers them); e.g. one adapter per role."""

    def load_files(self, checkpoint_dir: Path, *, with_optimizer: bool) -> None:
        """Restore what :meth:`save_files` wrote, when the run resumes from ``checkpoint_dir`` in
        this stage (``with_optimizer``: mid-stage; False at a stage boundary: weights only)."""
