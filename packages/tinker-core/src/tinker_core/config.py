"""The job configuration: pydantic models, loaded from YAML, with a JSON schema.

A job is one or more *stages* (e.g. SFT then GRPO) that share a model, an environment and a
seed. Every model forbids unknown keys, so a misspelled key is an error that names it. Names that
plugins provide (env ids, estimators, losses, optimizers) are checked against the plugin registry
by :func:`check_plugin_names`, which :func:`load_config` runs unless told not to.

Example::

    name: arithmetic-grpo
    seed: 0
    model: {name: tiny}
    env: {id: math/arithmetic-v0, kwargs: {digits: 2}}
    algorithm: {name: grpo, steps: 40, estimator: grpo, loss: importance_sampling}
    rollout: {group_size: 8, prompts_per_step: 16, max_new_tokens: 6, stop: ["\\n"]}
    optimizer: {name: adamw, lr: 0.001}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tinker_core.errors import ConfigError, UnknownNameError, did_you_mean

ALGORITHMS = ("sft", "grpo", "ppo", "dpo")
PRECISION_OF_DTYPE = {"auto": "auto", "float32": "fp32", "bfloat16": "bf16-mixed", "float16": "fp16-mixed"}
"""``model.dtype`` -> the precision the trainer runs in."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class ModelConfig(_Model):
    """Which causal LM to train."""

    name: str = Field("tiny", description="'tiny' (the embedded preset), a Hugging Face hub id, or a local directory.")
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights dtype; 'auto' is bf16 autocast on CUDA, fp32 on CPU."
    )
    device: str = Field("auto", description="'auto', 'cpu', 'cuda' or 'cuda:N'.")
    tokenizer: str | None = Field(None, description="Tokenizer location when it differs from the model's.")

    @property
    def precision(self) -> str:
        """The trainer precision this ``dtype`` asks for (see ``tinker_algos.device``)."""
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


class MultiAgentConfig(_Model):
    """How grpo plays an env with roles, a game (algorithm.params.multi_agent)."""

    mode: Literal["self_play", "opponent"] = Field(
        "self_play",
        description="self_play: the policy plays every role and learns from all; opponent: it plays learner_role against a scripted opponent.",
    )
    opponent: str = Field(
        "random",
        min_length=1,
        description="The scripted opponent in 'opponent' mode: one the env offers (random; minimax on games/tictactoe-v0).",
    )
    learner_role: str | None = Field(None, description="The policy's role in 'opponent' mode; None = the env's first role.")
    eval_opponent: str | None = Field(
        None, min_length=1, description="The scripted opponent of held-out evaluation (one the env offers); None = 'opponent'."
    )

    @field_validator("learner_role")
    @classmethod
    def _role_needs_opponent_mode(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and info.data.get("mode") == "self_play":
            raise ValueError("only used with mode: opponent (self-play trains every role)")
        return v


class GRPOParams(_Model):
    """Options of grpo (algorithm.params)."""

    estimator_config: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the advantage estimator (e.g. {normalize: true})."
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

    eval_data: str | None = Field(None, description="A JSONL of held-out prompt/chosen/rejected pairs, scored at each evaluation.")
    min_reward_gap: float = Field(
        0.0, ge=0.0, description="On-policy pairs: pair best and worst only when their rewards differ by more than this."
    )


# ---- the algorithm section: one model per algorithm, chosen by ``name`` -------------------------


class AlgorithmConfig(_Model):
    """How the policy learns: the fields every algorithm has (each name has its own params)."""

    name: Literal["sft", "grpo", "ppo", "dpo"] = Field(..., description="Algorithm; it selects the model of 'params'.")
    steps: int = Field(100, ge=1, description="Optimizer steps in this stage.")
    estimator: str | None = Field(
        None, description="Advantage estimator (grpo: grpo|dr_grpo|rloo|reinforce_pp_baseline...; ppo: gae)."
    )
    loss: str | None = Field(None, description="Policy loss by registered name; default per algorithm.")
    loss_config: dict[str, float] = Field(default_factory=dict, description="Keyword arguments of the loss.")
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="How per-token losses become one number."
    )
    kl: KLConfig = Field(default_factory=KLConfig, description="KL penalty to the reference policy.")
    batch_size: int = Field(32, ge=1, description="Examples per optimizer step: sequences for sft, chosen/rejected pairs for dpo.")
    micro_batch_size: int | None = Field(
        None, ge=1, description="Sequences per forward_backward (the minibatch of each ppo update); None = the whole batch."
    )
    epochs_per_step: int = Field(1, ge=1, description="Passes over each rollout batch (ppo).")
    data: str | None = Field(None, description="Data file: SFT examples or DPO pairs (JSONL).")
    eval_every: int = Field(0, ge=0, description="Held-out evaluation every N steps; 0 = only at the end.")
    eval_size: int = Field(64, ge=1, description="Held-out problems per evaluation.")


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

    prompts_per_step: int = Field(16, ge=1, description="Distinct prompts (groups) per step.")
    group_size: int = Field(8, ge=1, description="Samples per prompt.")
    max_new_tokens: int = Field(16, ge=1, description="Tokens generated per turn at most.")
    max_turns: int | None = Field(None, ge=1, description="Turn cap; None takes the env spec's.")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling; 0 disables.")
    stop: list[str] = Field(default_factory=lambda: ["\n"], description="Stop strings.")
    max_error_rate: float = Field(0.1, ge=0.0, le=1.0, description="Rollout error rate above which the step fails.")
    turn_timeout_s: float = Field(30.0, gt=0.0, description="Per-turn timeout for env and agent calls.")


class OptimizerConfig(_Model):
    """The optimizer (a registered name) and its schedule."""

    name: str = Field("adamw", description="Registered optimizer: adamw, sgd, lion, or a plugin's.")
    lr: float = Field(1e-3, gt=0.0, description="Peak learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="Decoupled weight decay.")
    grad_clip: float | None = Field(1.0, gt=0.0, description="Max global grad norm; None disables clipping.")
    schedule: Literal["constant", "linear", "cosine"] = Field("constant", description="LR schedule after warmup.")
    warmup_steps: int = Field(0, ge=0, description="Linear warmup steps.")
    params: dict[str, Any] = Field(default_factory=dict, description="Extra optimizer arguments (e.g. betas).")


class ResourcesConfig(_Model):
    """What the job needs; the scheduler places it accordingly."""

    cpus: float = Field(1.0, gt=0.0, description="CPU cores the job's actor reserves.")
    gpus: float = Field(0.0, ge=0.0, description="GPUs the job's actor reserves (fractions share one).")
    memory_gb: float | None = Field(None, gt=0.0, description="Memory reserved, in GiB; None reserves none.")


class CheckpointConfig(_Model):
    """When to checkpoint, how many to keep, whether to resume."""

    every: int = Field(0, ge=0, description="Checkpoint every N steps; 0 = only at the end.")
    keep: int = Field(2, ge=1, description="Checkpoints kept (older ones are deleted).")
    resume: bool = Field(True, description="Resume from the newest checkpoint in the run directory.")


class LoggingConfig(_Model):
    """Where metrics go: JSONL, TensorBoard, a learning-curve plot."""

    jsonl: bool = Field(True, description="Write metrics.jsonl in the run directory.")
    tensorboard: bool = Field(True, description="Write TensorBoard event files.")
    plot: bool = Field(True, description="Write a learning-curve PNG at the end.")
    every: int = Field(1, ge=1, description="Log metrics every N steps.")


class StageConfig(_Model):
    """One stage of a multi-stage job; unset sections are inherited from the job."""

    name: str | None = Field(None, description="A label; defaults to '<index>-<algorithm>'.")
    algorithm: AnyAlgorithm = Field(..., description="This stage's algorithm.")
    rollout: RolloutConfig | None = Field(None, description="Overrides the job's rollout section.")
    optimizer: OptimizerConfig | None = Field(None, description="Overrides the job's optimizer section.")
    env: EnvConfig | None = Field(None, description="Overrides the job's env section.")


class JobConfig(_Model):
    """A training job."""

    name: str = Field("job", min_length=1, max_length=128, description="A label for humans.")
    seed: int = Field(0, ge=0, description="Seeds every RNG; the same seed gives the same metrics.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The model to train.")
    lora: LoraConfig | None = Field(None, description="LoRA adapters; absent means full fine-tuning.")
    env: EnvConfig | None = Field(None, description="The environment (needed by grpo and ppo).")
    algorithm: AnyAlgorithm | None = Field(None, description="A one-stage job's algorithm; or use 'stages'.")
    stages: list[StageConfig] = Field(default_factory=list, description="Multi-stage jobs, run in order.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Sampling episodes.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer and schedule.")
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig, description="CPUs, GPUs, memory.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="When to checkpoint.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Metrics outputs.")
    priority: int = Field(0, ge=-100, le=100, description="Higher runs first in the scheduler's queue.")

    @model_validator(mode="after")
    def _one_plan(self) -> JobConfig:
        if self.algorithm is None and not self.stages:
            raise ValueError("give either 'algorithm' (one stage) or 'stages' (a list)")
        if self.algorithm is not None and self.stages:
            raise ValueError("give 'algorithm' or 'stages', not both")
        for stage in self.resolved_stages():
            if stage.algorithm.name != "sft" and stage.algorithm.name != "dpo" and stage.env is None:
                raise ValueError(f"algorithm {stage.algorithm.name!r} needs an 'env'")
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


# ---- loading and error formatting -------------------------------------------------------------


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside a field's annotation (through Optional, unions, lists, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _tag_of(model: type[BaseModel]) -> Any:
    """The ``name`` literal that selects ``model`` in a discriminated union (None if it has none)."""
    field = model.model_fields.get("name")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    return get_args(field.annotation)[0]


def _walk(loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], type[BaseModel] | None]:
    """An error location as the user wrote it, and the model at its end (None: not a model).

    pydantic puts the tag of a discriminated union into the location (``algorithm.ppo.params``);
    the file has no such level, so the tag is dropped and the tagged model followed.
    """
    model: type[BaseModel] | None = JobConfig
    parts, out = list(loc), []
    while parts:
        part = parts.pop(0)
        out.append(part)
        if isinstance(part, int):
            continue  # a list index: the items' model stays current
        field = model.model_fields.get(part) if model is not None else None
        variants = _models_in(field.annotation) if field is not None else []
        tagged = {_tag_of(m): m for m in variants if _tag_of(m) is not None}
        if len(variants) > 1 and parts and parts[0] in tagged:
            model = tagged[parts.pop(0)]
        else:
            model = variants[0] if len(variants) == 1 else None
    return tuple(out), model


def format_validation_error(err: ValidationError) -> list[str]:
    """One line per problem: the field path as written in the file, what is wrong, the value."""
    problems: list[str] = []
    for e in err.errors():
        loc, _ = _walk(tuple(e["loc"]))
        where = _loc(loc)
        if e["type"] == "extra_forbidden":
            _, parent = _walk(tuple(e["loc"])[:-1])
            known = list(parent.model_fields) if parent else []
            hint = did_you_mean(str(loc[-1]), known) if known else None
            msg = f"{where}: unknown key"
            if hint:
                msg += f"; did you mean {hint!r}?"
            elif parent is not None:
                msg += f"; allowed keys: {', '.join(known)}" if known else "; this section takes no keys"
            problems.append(msg)
            continue
        if e["type"] in ("union_tag_invalid", "union_tag_not_found"):  # a bad or missing algorithm name
            expected = ", ".join(repr(a) for a in ALGORITHMS[:-1]) + f" or {ALGORITHMS[-1]!r}"
            if e["type"] == "union_tag_not_found":
                problems.append(f"{_loc((*loc, 'name'))}: Field required; give one of {expected}")
            else:
                tag = json.dumps(e.get("ctx", {}).get("tag"), default=str)
                problems.append(f"{_loc((*loc, 'name'))}: Input should be {expected} (got {tag})")
            continue
        got = e.get("input")
        got_s = json.dumps(got, default=str) if not isinstance(got, dict) else "a mapping"
        if len(got_s) > 60:
            got_s = got_s[:57] + "..."
        msg = e["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        problems.append(f"{where}: {msg} (got {got_s})")
    return problems


def check_plugin_names(config: JobConfig) -> list[str]:
    """Problems with names that plugins provide: env ids, estimators, losses, optimizers."""
    from tinker_core.registry import get_registry

    problems: list[str] = []
    seen: set[tuple[str, str]] = set()

    def check(kind: str, name: str | None, where: str) -> None:
        if name is None or (kind, where) in seen:
            return
        seen.add((kind, where))
        try:
            get_registry(kind).get(name)
        except UnknownNameError as e:
            problems.append(f"{where}: {e.message}")

    def where(i: int, section: str, field: str) -> str:
        # a stage's own section, or the job-level one it inherits
        if config.stages and getattr(config.stages[i], section) is not None:
            return f"stages[{i}].{section}.{field}"
        return f"{section}.{field}"

    for i, stage in enumerate(config.resolved_stages()):
        algo = "algorithm" if config.algorithm is not None else f"stages[{i}].algorithm"
        check("advantage_estimators", stage.algorithm.estimator, f"{algo}.estimator")
        check("losses", stage.algorithm.loss, f"{algo}.loss")
        assert stage.optimizer is not None
        check("optimizers", stage.optimizer.name, where(i, "optimizer", "name"))
        if stage.env is not None and stage.env.address is None:
            check("envs", stage.env.id, where(i, "env", "id"))
    return problems


def parse_config(data: Any, *, source: str | None = None, check_plugins: bool = True) -> JobConfig:
    """Validate a mapping; raise :class:`ConfigError` listing every problem found."""
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping of sections, got {type(data).__name__}"], source)
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as e:
        problems = format_validation_error(e)
        if check_plugins:
            problems += _plugin_problems_of_raw(data)
        raise ConfigError(problems, source) from None
    if check_plugins:
        problems = check_plugin_names(config)
        if problems:
            raise ConfigError(problems, source)
    return config


def _plugin_problems_of_raw(data: dict[str, Any]) -> list[str]:
    """Best-effort plugin-name checks on a config that failed schema validation."""
    from tinker_core.registry import get_registry

    problems: list[str] = []
    env = data.get("env")
    env_id = env.get("id") if isinstance(env, dict) else None
    if isinstance(env_id, str) and not (isinstance(env, dict) and env.get("address")):
        try:
            get_registry("envs").get(env_id)
        except UnknownNameError as e:
            problems.append(f"env.id: {e.message}")
    return problems


def load_config(path_or_text: str | Path, *, check_plugins: bool = True) -> JobConfig:
    """Load a YAML (or JSON) job config from a file path or a YAML string."""
    import yaml

    source: str | None = None
    if isinstance(path_or_text, Path) or ("\n" not in str(path_or_text) and Path(str(path_or_text)).suffix in (".yaml", ".yml", ".json")):
        path = Path(path_or_text)
        source = str(path)
        if not path.is_file():
            raise ConfigError([f"config file {path} does not exist"], source)
        text = path.read_text(encoding="utf-8")
    else:
        text = str(path_or_text)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError([f"not valid YAML: {e}"], source) from None
    if data is None:
        raise ConfigError(["the file is empty; a job needs at least 'algorithm' (or 'stages')"], source)
    return parse_config(data, source=source, check_plugins=check_plugins)


# ---- reference documentation -----------------------------------------------------------------

_SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("(top level)", JobConfig),
    ("model", ModelConfig),
    ("lora", LoraConfig),
    ("env", EnvConfig),
    ("algorithm", AlgorithmConfig),
    ("algorithm.kl", KLConfig),
    ("algorithm.params (grpo)", GRPOParams),
    ("algorithm.params.multi_agent (grpo)", MultiAgentConfig),
    ("algorithm.params (ppo)", PPOParams),
    ("algorithm.params (dpo)", DPOParams),
    ("stages[]", StageConfig),
    ("rollout", RolloutConfig),
    ("optimizer", OptimizerConfig),
    ("resources", ResourcesConfig),
    ("checkpoint", CheckpointConfig),
    ("logging", LoggingConfig),
]
_PARAMS_ROW = (
    "| `params` | mapping | `{}` | The algorithm's own options: the `algorithm.params` sections below; sft takes none. |"
)


def _type_name(annotation: Any) -> str:
    if set(_models_in(annotation)) >= set(ALGORITHM_MODELS.values()):
        return "AlgorithmConfig" + (" | None" if type(None) in get_args(annotation) else "")
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "")
    if text.startswith("Optional[") and text.endswith("]"):
        text = text[len("Optional["):-1] + " | None"
    for model in (m for _, m in _SECTIONS):
        text = text.replace(f"tinker_core.config.{model.__name__}", model.__name__)
    return text.replace("NoneType", "None")


def render_reference() -> str:
    """The Markdown reference of every config field (``docs/reference/config.md``)."""
    lines = [
        "# Job config reference",
        "",
        "<!-- generated by `uv run python scripts/gen_docs.py`; a test fails when it is stale -->",
        "",
        "A job config is YAML. Unknown keys are errors; every error names the field path, the bad",
        "value and what is allowed. `uv run opentinker config validate FILE` checks a file and",
        "`uv run opentinker config schema` prints the JSON schema.",
        "",
        "```yaml",
        (__doc__ or "").split("Example::", 1)[1].strip("\n").replace("\n    ", "\n").strip().replace('\\\\n', '\\n'),
        "```",
    ]
    for section, model in _SECTIONS:
        lines += ["", f"## `{section}`", "", (model.__doc__ or "").strip().splitlines()[0], ""]
        lines += ["| field | type | default | description |", "| --- | --- | --- | --- |"]
        for name, field in model.model_fields.items():
            if field.is_required():
                default = "required"
            elif field.default_factory is not None:
                value = field.default_factory()  # type: ignore[call-arg]
                default = f"`{json.dumps(value, default=lambda o: '{...}')}`" if not isinstance(value, BaseModel) else "see below"
            else:
                default = f"`{json.dumps(field.default)}`"
            typ = _type_name(field.annotation).replace("|", "\\|")
            lines.append(f"| `{name}` | `{typ}` | {default} | {field.description or ''} |")
        if model is AlgorithmConfig:
            lines.append(_PARAMS_ROW)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(render_reference(), end="")
