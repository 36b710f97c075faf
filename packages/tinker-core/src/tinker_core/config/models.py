"""The job configuration's pydantic models: every section of a job config, and its JSON schema.

Every model forbids unknown keys, so a misspelled key is an error that names it. ``algorithm`` is
a union chosen by ``algorithm.name``: each algorithm has its own typed ``params``. Sizes have
generous upper bounds (the ``MAX_*`` constants), so a typo such as ``group_size: 100000000`` is
an error naming the field instead of a job that hangs; ``name`` is a safe directory name.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tinker_core.config.checkpointing import MAX_STEPS, CheckpointConfig
from tinker_core.config.data_source import DataSource, check_data_shorthand
from tinker_core.config.execution import ExecutionConfig, check_topology
from tinker_core.config.group_sampling import CurriculumConfig, DynamicSamplingConfig
from tinker_core.config.multi_agent import MultiAgentConfig
from tinker_core.config.recording import LoggingConfig

ALGORITHMS = ("sft", "grpo", "ppo", "dpo")
PRECISION_OF_DTYPE = {"auto": "auto", "float32": "fp32", "bfloat16": "bf16-mixed", "float16": "fp16-mixed"}
"""``model.dtype`` -> the precision the trainer runs in."""

# ---- limits: generous, but they stop a typo from validating and then hanging -----------------
MAX_SEED = 2**63 - 1
"""``seed`` fits in 63 bits (the RNGs and the wire take it as a signed 64-bit integer)."""
MAX_BATCH_SIZE = 65_536
"""``algorithm.batch_size``, ``micro_batch_size`` and ``eval_size``."""
MAX_GROUP_SIZE = 1024
"""``rollout.group_size``: samples per prompt."""
MAX_PROMPTS_PER_STEP = 4096
"""``rollout.prompts_per_step``."""
MAX_EPISODES_PER_STEP = 65_536
"""``rollout.prompts_per_step * rollout.group_size``: episodes sampled per step."""
MAX_NEW_TOKENS = 32_768
"""``rollout.max_new_tokens``: tokens generated per turn."""
MAX_TURNS = 10_000
"""``rollout.max_turns``."""
JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""``name``: it names the run directory (``runs/<name>``), so it must be a safe directory name."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def _no_control_chars(v: Any) -> Any:
    """A name or path field: no NUL or other control characters (they cannot name a file)."""
    if isinstance(v, str) and any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError("must not hold control characters (NUL, newline, ...); give a plain name or path")
    return v


class ModelConfig(_Model):
    """Which causal LM to train."""

    name: str = Field(
        "tiny",
        min_length=1,
        max_length=4096,
        description="'tiny' (the embedded preset), a Hugging Face hub id, or a local directory (on a scheduler: under a --model-root).",
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="'auto': bf16 autocast on a GPU with bf16, else fp32. 'float16': fp16 autocast with a "
        "gradient scaler (overflowing updates skipped, scale halved: optim/grad_scale; checkpointed); CPU too.",
    )
    device: str = Field("auto", description="'auto', 'cpu', 'cuda' or 'cuda:N'.")
    tokenizer: str | None = Field(
        None, min_length=1, max_length=4096, description="Tokenizer location when it differs from the model's."
    )

    chat_template: str = Field(
        "auto",
        min_length=1,
        max_length=4096,
        description=(
            "How env observations become prompts: 'auto' = the tokenizer's chat template when it has one "
            "(the tiny preset's stays plain text), 'tokenizer' = the tokenizer's template (an error when it "
            "has none), 'none' = plain text, or the path of a Jinja chat-template file."
        ),
    )

    threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description=(
            "CPU threads torch uses for this job's model (intra-op); None keeps torch's default, one per core. "
            "On a machine other busy processes share, fewer threads than cores (1 on 2 cores) keeps a step "
            "from slowing several-fold (docs/explanation/experiments/sampler.md, 'Threads on a shared machine'); the same "
            "count gives the same metrics. Ignored for jobs on a scheduler's shared model host (the host's own setting)."
        ),
    )

    release_memory: bool = Field(
        False,
        description=(
            "On the CPU with glibc (Linux), map every block of 64 KiB or more on its own and return it to the system when "
            "freed, instead of glibc's moving threshold that serves a training pass's tensors from a heap that only grows: "
            "the process's resident memory follows what its tensors hold (a checkpointed SmolLM2 pass of 8 x 400 tokens: "
            "1.9 instead of 4.8 GiB), for the page faults of mapping blocks again. Process-wide; no effect elsewhere."
        ),
    )

    _plain_names = field_validator("name", "revision", "tokenizer", "chat_template")(_no_control_chars)

    @property
    def precision(self) -> str:
        """The trainer precision this ``dtype`` asks for (see ``tinker_algos.model.device``)."""
        return PRECISION_OF_DTYPE[self.dtype]


class LoraConfig(_Model):
    """LoRA through peft; absent means full fine-tuning."""

    rank: int = Field(8, ge=1, le=1024, description="Adapter rank r.")
    alpha: float = Field(16.0, gt=0, description="Scaling numerator (scale = alpha / rank).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapter input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="Names of the modules that get adapters.",
    )


class EnvConfig(_Model):
    """The environment: a registered env id, built locally or served from ``address``."""

    id: str = Field(..., description="Registered env id, 'namespace/name-vN'.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Arguments to the env factory.")
    address: str | None = Field(None, description="host:port of an EnvService; None builds the env in-process.")
    eval_kwargs: dict[str, Any] | None = Field(None, description="Factory arguments for held-out evaluation.")
    system_prompt: str | None = Field(
        None,
        description="System message for chat-template prompts (training and evaluation): None uses the env spec's, '' gives none; ignored for plain-text prompts.",
    )

    @field_validator("id")
    @classmethod
    def _id_format(cls, v: str) -> str:
        from tinker_core.env import parse_env_id

        parse_env_id(v)
        return v


class KLConfig(_Model):
    """A KL penalty to the reference (initial) policy."""

    coef: float = Field(0.0, ge=0.0, description="Weight of the KL term; 0 disables it.")
    estimator: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator.")
    mode: Literal["loss", "reward"] = Field("loss", description="Add it to the loss, or subtract it from rewards.")


# ---- algorithm-specific options (``algorithm.params``) ---------------------------------------


class SFTParams(_Model):
    """Options of sft (algorithm.params): it takes none."""


class GRPOParams(_Model):
    """Options of grpo (algorithm.params)."""

    estimator_config: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Keyword arguments of the advantage estimator: grpo takes eps (1e-6), reinforce_pp gamma (1.0) and "
            "whiten (true), reinforce_pp_baseline whiten (true); dr_grpo and rloo take none. A key the "
            "estimator does not take fails before the first rollout."
        ),
    )
    multi_agent: MultiAgentConfig | None = Field(
        None, description="How a multi-agent env is played; only for envs with roles (default: self-play)."
    )


class PPOParams(_Model):
    """Options of ppo (algorithm.params): the critic and the estimator."""

    critic: Literal["head", "separate"] = Field(
        "head",
        description="head: a value head on the policy's last hidden state; separate: a copy of the starting policy with a head.",
    )
    vf_coef: float = Field(0.1, ge=0.0, description="Weight of the value loss.")
    value_clip: float | None = Field(0.2, ge=0.0, description="Clip range of the value loss; None = unclipped.")
    critic_lr: float | None = Field(None, gt=0.0, description="Learning rate of the critic's optimizer; None = the optimizer's lr.")
    detach_head: bool = Field(False, description="head mode: stop the value gradient at the hidden state.")
    estimator_config: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the estimator: gamma (1.0), lam (0.95), whiten."
    )


class DPOParams(_Model):
    """Options of dpo (algorithm.params)."""

    eval_data: DataSource | None = Field(None, description="Held-out prompt/chosen/rejected pairs, scored at each evaluation: a JSONL path (a string) or a data source mapping, as algorithm.data.")
    min_reward_gap: float = Field(
        0.0, ge=0.0, description="On-policy pairs: pair best and worst only when their rewards differ by more than this."
    )

    _plain_data = field_validator("eval_data", mode="before", json_schema_input_type=str | DataSource | None)(check_data_shorthand)


# ---- the algorithm section: one model per algorithm, chosen by ``name`` -------------------------


class AlgorithmConfig(_Model):
    """How the policy learns: the fields every algorithm has (each name has its own params)."""

    name: Literal["sft", "grpo", "ppo", "dpo"] = Field(..., description="Algorithm; it selects the model of 'params'.")
    steps: int = Field(100, ge=1, le=MAX_STEPS, description=f"Optimizer steps in this stage (at most {MAX_STEPS:,}).")
    estimator: str | None = Field(
        None, description="Advantage estimator (grpo: grpo|dr_grpo|rloo|reinforce_pp_baseline...; ppo: gae)."
    )
    loss: str | None = Field(None, description="Policy loss by registered name; default per algorithm.")
    loss_config: dict[str, float] = Field(default_factory=dict, description="Keyword arguments of the loss.")
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="How per-token losses become one number."
    )
    kl: KLConfig = Field(default_factory=KLConfig, description="KL penalty to the reference policy.")
    batch_size: int = Field(
        32, ge=1, le=MAX_BATCH_SIZE,
        description=f"Examples per optimizer step: sequences for sft, chosen/rejected pairs for dpo (at most {MAX_BATCH_SIZE:,}).",
    )
    micro_batch_size: int | None = Field(
        None, ge=1, le=MAX_BATCH_SIZE, description="Sequences per forward_backward (the minibatch of each ppo update); None = the whole batch."
    )
    share_prefix: bool = Field(
        True, description="Run a prompt that several sequences share (a grpo group's copies) through the model once in each training pass; same results up to float rounding, fewer token positions. false: one full pass per sequence.",
    )
    chunked_logprobs: bool = Field(
        True, description="Compute the LM head and log-softmax only at the trained tokens, a chunk at a time, from the last hidden states (Llama/Qwen/Mistral-family models; others take the full logits): same results up to float rounding, without the whole batch's logits in memory. false: the full logits.",
    )
    activation_checkpointing: bool = Field(
        False, description="Keep only each decoder layer's input for backward and recompute the layer then (transformers' checkpointing): the training pass's activations shrink to one hidden vector per token and layer, for about one more forward pass of time; a long multi-turn batch trains in one pass without micro_batch_size. The shared-prompt pass is off under it (the KV cache is).",
    )
    epochs_per_step: int = Field(1, ge=1, le=1000, description="Passes over each rollout batch (ppo; at most 1000).")
    data: DataSource | None = Field(None, description="SFT examples or DPO pairs: a JSONL path (a string), or a data source mapping with path or hub, split, fields, max_rows (see the section below); on a scheduler, a path under a --model-root or the tenant's runs.")
    eval_every: int = Field(0, ge=0, le=MAX_STEPS, description="Held-out evaluation every N steps; 0 = only at the end.")
    eval_size: int = Field(64, ge=1, le=MAX_BATCH_SIZE, description=f"Held-out problems per evaluation (at most {MAX_BATCH_SIZE:,}).")
    eval_temperature: float | None = Field(
        None, gt=0.0, le=10.0,
        description="Also evaluate sampled: each evaluation plays its eval_size held-out problems a second time at this temperature (seeded, top_p 1), reported as eval/sampled_accuracy and eval/sampled_reward_mean beside the greedy eval/accuracy; None: greedy only. Single-agent envs and agent programs.",
    )
    stop_at: dict[str, float] | None = Field(None, description="End the stage at the first evaluation where every named held-out metric reaches its value (e.g. {eval/accuracy: 0.3}); 'steps' is then the most it runs. Needs eval_every.")

    _plain_data = field_validator("data", mode="before", json_schema_input_type=str | DataSource | None)(check_data_shorthand)

    @model_validator(mode="after")
    def _stop_at_needs_evaluations(self) -> AlgorithmConfig:
        stop = self.stop_at
        if stop is not None and (not stop or not self.eval_every or any(not k.startswith("eval/") or not math.isfinite(v) for k, v in stop.items())):
            raise ValueError(f"stop_at {stop!r}: name held-out metrics with finite values, e.g. {{eval/accuracy: 0.3}}, and set eval_every > 0 (the stage checks it at each evaluation)")
        return self


class SFTAlgorithm(AlgorithmConfig):
    """``algorithm`` with ``name: sft``."""

    name: Literal["sft"] = Field(..., description="Algorithm.")
    params: SFTParams = Field(default_factory=SFTParams, description="sft takes none.")


class GRPOAlgorithm(AlgorithmConfig):
    """``algorithm`` with ``name: grpo``."""

    name: Literal["grpo"] = Field(..., description="Algorithm.")
    params: GRPOParams = Field(default_factory=GRPOParams, description="grpo options (see algorithm.params (grpo)).")


class PPOAlgorithm(AlgorithmConfig):
    """``algorithm`` with ``name: ppo``."""

    name: Literal["ppo"] = Field(..., description="Algorithm.")
    params: PPOParams = Field(default_factory=PPOParams, description="ppo options (see algorithm.params (ppo)).")


class DPOAlgorithm(AlgorithmConfig):
    """``algorithm`` with ``name: dpo``."""

    name: Literal["dpo"] = Field(..., description="Algorithm.")
    params: DPOParams = Field(default_factory=DPOParams, description="dpo options (see algorithm.params (dpo)).")


AnyAlgorithm = Annotated[SFTAlgorithm | GRPOAlgorithm | PPOAlgorithm | DPOAlgorithm, Field(discriminator="name")]
"""The ``algorithm`` section: the model of its ``name`` (a discriminated union)."""
ALGORITHM_MODELS: dict[str, type[AlgorithmConfig]] = {"sft": SFTAlgorithm, "grpo": GRPOAlgorithm, "ppo": PPOAlgorithm, "dpo": DPOAlgorithm}


class RolloutConfig(_Model):
    """Sampling episodes from the environment."""

    prompts_per_step: int = Field(
        16, ge=1, le=MAX_PROMPTS_PER_STEP,
        description=f"Distinct prompts (groups) per step (at most {MAX_PROMPTS_PER_STEP:,}; times group_size at most {MAX_EPISODES_PER_STEP:,}).",
    )
    group_size: int = Field(8, ge=1, le=MAX_GROUP_SIZE, description=f"Samples per prompt (at most {MAX_GROUP_SIZE:,}).")
    max_new_tokens: int = Field(16, ge=1, le=MAX_NEW_TOKENS, description=f"Tokens generated per turn at most (at most {MAX_NEW_TOKENS:,}).")
    max_turns: int | None = Field(None, ge=1, le=MAX_TURNS, description=f"Turn cap; None takes the env spec's (at most {MAX_TURNS:,}).")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling; 0 disables.")
    stop: list[str] = Field(default_factory=lambda: ["\n"], description="Stop strings.")
    max_error_rate: float = Field(0.1, ge=0.0, le=1.0, description="Rollout error rate above which the step fails.")
    turn_timeout_s: float = Field(30.0, gt=0.0, le=86_400.0, description="Per-turn timeout for env and agent calls (at most a day).")
    reuse_kv_cache: bool = Field(
        True,
        description="Keep each episode's KV cache from one turn to the next, so a turn prefills only the tokens added "
        "since (single-agent rollouts and evaluation); false prefills the whole conversation every turn (for comparison).",
    )
    engine: str = Field(
        "hf",
        description="The rollout engine that samples episodes: hf (the in-process sampler, the default), vllm (a vLLM "
        "server over HTTP; pip install tinker-engine-vllm) or a plugin's (opentinker plugins lists them).",
    )
    engine_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options the engine reads, checked when it starts (vllm: url, timeout_s, probe_tolerance; see the "
        "rollout engines guide). hf takes none.",
    )
    max_staleness: int = Field(
        0, ge=0, le=8,
        description="Updates a batch may lag behind the policy: k > 0 samples step s + k's episodes while step s trains "
        "(single-agent GRPO; the loss's ratio to the sampler's logprobs corrects for it). 0: on-policy.",
    )
    dynamic_sampling: DynamicSamplingConfig = Field(
        default_factory=DynamicSamplingConfig,
        description="GRPO: drop groups without a learning signal (rewards all tied, or a prompt always/never solved) and refill the step with fresh prompts.",
    )
    curriculum: CurriculumConfig = Field(
        default_factory=CurriculumConfig, description="GRPO: draw training prompts at the env's difficulty levels, moving by recent success.",
    )

    @model_validator(mode="after")
    def _episodes_per_step(self) -> RolloutConfig:
        episodes = self.prompts_per_step * self.group_size
        if episodes > MAX_EPISODES_PER_STEP:
            raise ValueError(
                f"prompts_per_step * group_size = {episodes:,} episodes per step; at most {MAX_EPISODES_PER_STEP:,} "
                "(e.g. prompts_per_step: 64, group_size: 16)"
            )
        return self


class OptimizerConfig(_Model):
    """The optimizer (a registered name) and its schedule."""

    name: str = Field("adamw", description="Registered optimizer: adamw, sgd, lion, or a plugin's.")
    lr: float = Field(1e-3, gt=0.0, description="Peak learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="Decoupled weight decay.")
    grad_clip: float | None = Field(1.0, gt=0.0, description="Max global grad norm; None disables clipping.")
    schedule: Literal["constant", "linear", "cosine"] = Field("constant", description="LR schedule after warmup.")
    warmup_steps: int = Field(0, ge=0, le=MAX_STEPS, description="Linear warmup steps.")
    params: dict[str, Any] = Field(default_factory=dict, description="Extra optimizer arguments (e.g. betas).")


class ResourcesConfig(_Model):
    """What the job needs; the scheduler places it accordingly."""

    cpus: float = Field(1.0, gt=0.0, le=100_000, description="CPU cores the job's actor reserves.")
    gpus: float = Field(0.0, ge=0.0, le=10_000, description="GPUs the job's actor reserves (fractions share one).")
    memory_gb: float | None = Field(None, gt=0.0, le=10_000_000, description="Memory reserved, in GiB; None reserves none.")


class StageConfig(_Model):
    """One stage of a multi-stage job; unset sections are inherited from the job."""

    name: str | None = Field(None, min_length=1, max_length=128, description="A label; defaults to '<index>-<algorithm>'.")
    algorithm: AnyAlgorithm = Field(..., description="This stage's algorithm.")
    rollout: RolloutConfig | None = Field(None, description="Overrides the job's rollout section.")
    optimizer: OptimizerConfig | None = Field(None, description="Overrides the job's optimizer section.")
    env: EnvConfig | None = Field(None, description="Overrides the job's env section.")


class JobConfig(_Model):
    """A training job."""

    name: str = Field(
        "job",
        description="The job's name; it names the run directory (runs/NAME), so 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit, without '..'.",
    )
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seeds every RNG; the same seed on the same machine, thread count and versions gives the same metrics, another CPU is another sample (0 to 2**63-1; docs/explanation/determinism.md).")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The model to train.")
    lora: LoraConfig | None = Field(None, description="LoRA adapters; absent means full fine-tuning.")
    env: EnvConfig | None = Field(None, description="The environment (needed by grpo and ppo).")
    algorithm: AnyAlgorithm | None = Field(None, description="A one-stage job's algorithm; or use 'stages'.")
    stages: list[StageConfig] = Field(default_factory=list, description="Multi-stage jobs, run in order.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Sampling episodes.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer and schedule.")
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig, description="CPUs, GPUs, memory.")
    execution: ExecutionConfig = Field(
        default_factory=ExecutionConfig,
        description="Rollout workers and data-parallel learners (the execution section); by default the job runs in one process.",
    )
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="When to checkpoint.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Metrics outputs.")
    priority: int = Field(0, ge=-100, le=100, description="Higher runs first in the scheduler's queue.")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not JOB_NAME_RE.fullmatch(v) or ".." in v:
            raise ValueError(
                "must be a safe directory name: 1-128 letters, digits, '.', '_' or '-', starting with a "
                "letter or digit, without '..' (e.g. 'arithmetic-grpo')"
            )
        return v

    @model_validator(mode="after")
    def _one_plan(self) -> JobConfig:
        if self.algorithm is None and not self.stages:
            raise ValueError("give either 'algorithm' (one stage) or 'stages' (a list)")
        if self.algorithm is not None and self.stages:
            raise ValueError("give 'algorithm' or 'stages', not both")
        for stage in self.resolved_stages():
            if stage.algorithm.name != "sft" and stage.algorithm.name != "dpo" and stage.env is None:
                raise ValueError(f"algorithm {stage.algorithm.name!r} needs an 'env'")
        check_topology(self)
        return self

    def resolved_stages(self) -> list[StageConfig]:
        """Every stage with the job-level sections filled in."""
        if self.algorithm is not None:
            plan = [StageConfig(name=self.algorithm.name, algorithm=self.algorithm)]
        else:
            plan = self.stages
        return [
            StageConfig(
                name=s.name or f"{i}-{s.algorithm.name}",
                algorithm=s.algorithm,
                rollout=s.rollout or self.rollout,
                optimizer=s.optimizer or self.optimizer,
                env=s.env or self.env,
            )
            for i, s in enumerate(plan)
        ]

    @property
    def total_steps(self) -> int:
        return sum(s.algorithm.steps for s in self.resolved_stages())


def json_schema() -> dict[str, Any]:
    """The JSON schema of :class:`JobConfig` (``opentinker config schema``)."""
    return JobConfig.model_json_schema()


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside a field's annotation (through Optional, unions, lists, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in models_in(arg)]
