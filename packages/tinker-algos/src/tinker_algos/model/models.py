"""Models: load causal LMs, LoRA adapters, and logprob math.

* :func:`load_model` loads what :func:`tinker_algos.model.model_files.resolve_model` resolves
  (``"tiny"``, a local directory or a hub id; the tiny preset and the cache live there).
* :class:`PolicyModel` holds a model and its tokenizer on a device and manages named LoRA adapters
  (several on one base model; one active at a time).
* :func:`sequence_logprobs` is the one place where token logprobs are computed from logits; the
  trainer and the sampler agree because both use the same alignment and positions.

Hub ids are loaded with ``from_pretrained``; set ``HF_HUB_OFFLINE=1`` to forbid network access
(the HF libraries then read only their local cache).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tinker_algos.model.device import DeviceSpec, resolve_device
from tinker_algos.model.head_logprobs import base_of, head_route, pick_logprobs, run_model
from tinker_algos.model.model_files import (  # re-exported: their home was this module
    TINY,
    TINY_CONFIG,
    ModelLoadError,
    atomic_dir,
    build_tiny_model,
    cache_root,
    resolve_model,
    tiny_config,
    tiny_fingerprint,
)

if TYPE_CHECKING:
    from peft import LoraConfig
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------
def load_model(
    name_or_path: str | Path, *, spec: DeviceSpec | None = None, field: str = "model", **kwargs: Any
) -> PreTrainedModel:
    """Load a causal LM with ``AutoModelForCausalLM.from_pretrained`` onto ``spec``'s device.

    Errors are one-line :class:`ModelLoadError` naming ``field`` (e.g. ``model.name``).
    """
    from transformers import AutoModelForCausalLM

    spec = spec or resolve_device()
    path = resolve_model(name_or_path, field=field, revision=kwargs.get("revision"))
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=spec.param_dtype, **kwargs)
    except OSError as e:
        hint = " (HF_HUB_OFFLINE=1 is set: only the local cache is read)" if os.environ.get("HF_HUB_OFFLINE") else ""
        reason = " ".join(str(e).split())
        raise ModelLoadError(f"{field}: could not load model {str(name_or_path)!r}{hint}: {reason}") from e
    model.to(spec.device)  # type: ignore[arg-type]
    model.eval()
    return model


def check_vocab(model: Any, tokenizer: PreTrainedTokenizerBase, *, model_id: str = "") -> None:
    """Raise :class:`ModelLoadError` when the tokenizer has ids the model cannot embed."""
    rows = model.get_input_embeddings().weight.shape[0]
    n = len(tokenizer)
    if n > rows:
        raise ModelLoadError(
            f"tokenizer has {n} tokens but model {model_id or ''} embeds only {rows} (vocab_size); "
            "load the tokenizer that belongs to this model, or resize the model's embeddings"
        )


@dataclass
class LoraSpec:
    """A LoRA adapter's settings (mapped onto ``peft.LoraConfig``).

    ``target_modules``: module names (``["q_proj", "v_proj"]``) or ``"all-linear"`` (every linear
    layer except the output head).
    """

    rank: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] | str = "all-linear"
    bias: str = "none"

    def to_peft(self) -> LoraConfig:
        from peft import LoraConfig

        if self.rank < 1:
            raise ValueError(f"LoraSpec.rank must be >= 1, got {self.rank}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraSpec.dropout must be in [0, 1), got {self.dropout}")
        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(
            task_type="CAUSAL_LM",
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=targets,
            bias=self.bias,  # type: ignore[arg-type]
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoraSpec:
        return cls(**{k: d[k] for k in ("rank", "alpha", "dropout", "target_modules", "bias") if k in d})


ADAPTER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def check_adapter_name(name: object) -> str:
    """Adapter names: letters, digits, ``_`` and ``-``, and not part of peft's ``lora_`` prefix.

    (peft matches saved weights by substring; a name inside ``"lora_"`` such as ``"a"`` or
    ``"lo"`` can make it re-initialise weights on load.)
    """
    if not isinstance(name, str) or not ADAPTER_NAME_RE.fullmatch(name):
        raise ValueError(
            f"adapter name {name!r} is invalid; use letters, digits, '_' and '-' (e.g. 'job-42')"
        )
    if name in "lora_":
        raise ValueError(f"adapter name {name!r} is part of peft's 'lora_' prefix; choose a longer name")
    return name


def adapter_of(param_name: str) -> str | None:
    """The adapter a peft parameter belongs to (``...lora_A.<adapter>.weight``), else None."""
    parts = param_name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p.startswith("lora_") or p == "modules_to_save":
            return parts[i + 1]
    return None


PEFT_DEPRECATION = r"`is_gradient_checkpointing` is deprecated"
"""The start of transformers' FutureWarning that peft triggers each time it wraps a model (it reads
the deprecated ``is_gradient_checkpointing`` property); :func:`peft_quietly` drops that one."""


@contextlib.contextmanager
def peft_quietly() -> Iterator[None]:
    """Wrap a model with peft without transformers' ``is_gradient_checkpointing`` FutureWarning
    (peft's doing, not the user's: it printed on every LoRA command); every other warning shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PEFT_DEPRECATION, category=FutureWarning, module=r"transformers\.")
        yield


@dataclass
class PolicyModel:
    """A causal LM, its tokenizer and device, plus any named LoRA adapters on it.

    Without adapters, :attr:`module` is the transformers model and full fine-tuning trains all
    of it. After :meth:`add_adapter`, :attr:`module` is a ``peft.PeftModel``; exactly one adapter
    is active (used by forward passes and trainable) at a time -- pick it with
    :meth:`set_adapter` or the :meth:`using_adapter` context. Base weights are then frozen.
    """

    model: Any
    tokenizer: PreTrainedTokenizerBase
    model_id: str
    spec: DeviceSpec
    lora_specs: dict[str, LoraSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_vocab(self.model, self.tokenizer, model_id=self.model_id)

    @classmethod
    def load(
        cls,
        name_or_path: str | Path = TINY,
        *,
        device: str | None = None,
        precision: str | None = None,
        spec: DeviceSpec | None = None,
        tokenizer: str | Path | None = None,
        revision: str | None = None,
    ) -> PolicyModel:
        """Load model and tokenizer (``"tiny"``, a local directory or a hub id).

        ``tokenizer`` loads the tokenizer from elsewhere; ``revision`` pins a hub revision.
        """
        from tinker_algos.model.tokenizer import (
            load_tokenizer,  # transformers: imported on first use
        )

        spec = spec or resolve_device(device, precision)
        tok_field = "model.tokenizer" if tokenizer else "model.name"
        tok_path = resolve_model(tokenizer or name_or_path, field=tok_field, revision=None if tokenizer else revision)
        try:
            tok = load_tokenizer(tok_path)
        except (OSError, ValueError, TypeError) as e:
            if isinstance(e, ModelLoadError):
                raise
            raise ModelLoadError(
                f"{tok_field}: no tokenizer could be loaded from {str(tokenizer or name_or_path)!r} "
                f"({type(e).__name__}); save the tokenizer there (tokenizer.save_pretrained) or set "
                "model.tokenizer to a directory or hub id that has one"
            ) from e
        model = load_model(name_or_path, spec=spec, field="model.name", **({"revision": revision} if revision else {}))
        return cls(model=model, tokenizer=tok, model_id=str(name_or_path), spec=spec)

    # ---- properties -------------------------------------------------------------------------
    @property
    def module(self) -> torch.nn.Module:
        """What to call: the peft model when adapters exist, else the transformers model."""
        return self.model

    @property
    def is_peft(self) -> bool:
        return hasattr(self.model, "peft_config")

    @property
    def base_model(self) -> Any:
        """The underlying transformers model (adapters injected, if any)."""
        return self.model.get_base_model() if self.is_peft else self.model

    @property
    def device(self) -> torch.device:
        return self.spec.device

    @property
    def pad_token_id(self) -> int:
        tid = self.tokenizer.pad_token_id
        if tid is None:
            tid = self.tokenizer.eos_token_id
        return int(tid if tid is not None else 0)

    @property
    def eos_token_id(self) -> int | None:
        tid = self.tokenizer.eos_token_id
        return None if tid is None else int(tid)

    @property
    def adapter_names(self) -> list[str]:
        return sorted(self.model.peft_config) if self.is_peft else []

    @property
    def active_adapter(self) -> str | None:
        return self.model.active_adapter if self.is_peft else None

    # ---- adapters ---------------------------------------------------------------------------
    def add_adapter(self, name: str, lora: LoraSpec | None = None, *, seed: int | None = None) -> None:
        """Add a new LoRA adapter ``name`` (initialised so the model's outputs do not change).

        ``seed`` makes the adapter's random init deterministic without touching the global RNG.
        The new adapter becomes active.
        """
        from peft import get_peft_model

        check_adapter_name(name)
        if name in self.adapter_names:
            raise ValueError(f"adapter {name!r} already exists on this model; names are {self.adapter_names}")
        lora = lora or LoraSpec()
        cfg = lora.to_peft()
        rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
        with rng:
            if seed is not None:
                torch.manual_seed(seed)
            if self.is_peft:
                self.model.add_adapter(name, cfg)
            else:
                with peft_quietly():
                    self.model = get_peft_model(self.model, cfg, adapter_name=name)
        self.lora_specs[name] = lora
        self.set_adapter(name)

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Add adapter ``name`` with the weights saved in ``path`` (a peft ``save_pretrained`` dir)."""
        from peft import PeftConfig, PeftModel

        check_adapter_name(name)
        if name in self.adapter_names:
            raise ValueError(f"adapter {name!r} already exists on this model; names are {self.adapter_names}")
        cfg = PeftConfig.from_pretrained(str(path))
        if self.is_peft:
            self.model.load_adapter(str(path), adapter_name=name, is_trainable=True)
        else:
            with peft_quietly():
                self.model = PeftModel.from_pretrained(self.model, str(path), adapter_name=name, is_trainable=True)
        self.lora_specs[name] = LoraSpec(
            rank=cfg.r,
            alpha=int(cfg.lora_alpha),
            dropout=cfg.lora_dropout,
            target_modules=sorted(cfg.target_modules) if isinstance(cfg.target_modules, set) else cfg.target_modules,
            bias=cfg.bias,
        )
        self.set_adapter(name)

    def remove_adapter(self, name: str) -> None:
        """Delete adapter ``name``; removing the last one leaves the plain base model."""
        if name not in self.adapter_names:
            raise ValueError(f"unknown adapter {name!r}; this model has {self.adapter_names}")
        if len(self.adapter_names) == 1:
            self.model = self.model.unload()
        else:
            self.model.delete_adapter(name)
            self.set_adapter(self.model.active_adapter if self.model.active_adapter in self.adapter_names else self.adapter_names[0])
        self.lora_specs.pop(name, None)

    def set_adapter(self, name: str) -> None:
        """Make ``name`` the active adapter (used by forward passes and the only trainable one)."""
        if not self.is_peft:
            raise ValueError(f"model {self.model_id!r} has no adapters; add one with add_adapter({name!r})")
        if name not in self.model.peft_config:
            raise ValueError(f"unknown adapter {name!r}; this model has {self.adapter_names}")
        if self.model.active_adapter != name or not self._adapter_trainable(name):
            self.model.set_adapter(name)

    def _adapter_trainable(self, name: str) -> bool:
        params = self.adapter_parameters(name)
        return bool(params) and all(p.requires_grad for p in params)

    @contextlib.contextmanager
    def using_adapter(self, name: str | None) -> Iterator[None]:
        """Run with adapter ``name`` active (None: leave things as they are); restores after."""
        if name is None:
            yield
            return
        prev = self.active_adapter
        self.set_adapter(name)
        try:
            yield
        finally:
            if prev is not None and prev != name:
                self.set_adapter(prev)

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        """Run on the base model alone (every adapter off), e.g. for reference logprobs."""
        if not self.is_peft:
            yield
            return
        with self.model.disable_adapter():
            yield

    def adapter_parameters(self, name: str) -> list[torch.nn.Parameter]:
        """The parameters of adapter ``name`` (in a stable order)."""
        return [p for n, p in self.model.named_parameters() if adapter_of(n) == name]

    def copy_adapter_weights(self, source: str, target: str) -> None:
        """Set adapter ``target``'s weights to adapter ``source``'s (same LoRA shapes), in place."""
        def named(adapter: str) -> dict[str, torch.nn.Parameter]:
            marker = f".{adapter}."
            return {n.replace(marker, ".<a>."): p for n, p in self.model.named_parameters() if adapter_of(n) == adapter}

        own, into = named(source), named(target)
        if own.keys() != into.keys() or any(own[k].shape != p.shape for k, p in into.items()):
            raise ValueError(f"adapters {source!r} and {target!r} differ in shape (LoRA rank or target modules); cannot copy")
        with torch.no_grad():
            for key, p in into.items():
                p.copy_(own[key])

    def trainable_parameters(self, adapter: str | None = None) -> list[tuple[str, torch.nn.Parameter]]:
        """``(name, param)`` to optimise: adapter ``adapter``'s, or every weight without adapters."""
        if adapter is None:
            if self.is_peft:
                raise ValueError(
                    "this model carries LoRA adapters, so its base weights are frozen; name the "
                    f"adapter to train (one of {self.adapter_names})"
                )
            return list(self.model.named_parameters())
        if adapter not in self.adapter_names:
            raise ValueError(f"unknown adapter {adapter!r}; this model has {self.adapter_names}")
        return [(n, p) for n, p in self.model.named_parameters() if adapter_of(n) == adapter]


# ---------------------------------------------------------------------------------------------
# forward-pass helpers shared by the sampler and the trainer
# ---------------------------------------------------------------------------------------------
def accepts_kwarg(module: torch.nn.Module, name: str) -> bool:
    """Whether the forward() of ``module`` (a peft wrapper's base model) takes the keyword ``name``
    (``logits_to_keep``, ``cache``: they differ between transformers versions and models)."""
    base = base_of(module)
    try:
        return name in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def cache_kwarg(module: torch.nn.Module) -> str:
    """The forward() keyword of the KV cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    return "cache" if accepts_kwarg(module, "cache") else "past_key_values"


def position_ids_from_mask(attention_mask_B_T: torch.Tensor) -> torch.Tensor:
    """Positions that count only real tokens: 0 at each row's first real token (left pads -> 0)."""
    return (attention_mask_B_T.long().cumsum(-1) - 1).clamp(min=0)


def sequence_logprobs(
    module: torch.nn.Module,
    tokens_B_T: torch.Tensor,
    attention_mask_B_T: torch.Tensor,
    *,
    temperature: float = 1.0,
    spec: DeviceSpec | None = None,
    positions_B_T: torch.Tensor | None = None,
    rest: bool = False,
    chunked: bool = True,
) -> torch.Tensor:
    """Log-probabilities of each token given the tokens before it, ``[B, T]`` float32.

    ``out[:, t] = log softmax(logits[:, t - 1] / temperature)[tokens[:, t]]``; ``out[:, 0] = 0``
    and positions where ``attention_mask_B_T`` is 0 are 0. Differentiable when grad is enabled.
    ``positions_B_T`` (the tokens a loss reads; None: every token) leaves the others at 0, or
    with ``rest`` fills them detached (no gradient flows through them); with ``chunked`` (the head
    route of :mod:`tinker_algos.model.head_logprobs`, where the model allows it) the LM head runs
    only at the positions filled, a chunk at a time.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for logprobs, got {temperature}")
    mask = attention_mask_B_T.to(tokens_B_T.device)
    autocast = spec.autocast if spec is not None else contextlib.nullcontext
    route = head_route(module, chunked=chunked)
    states, _ = run_model(
        module, route, autocast, input_ids=tokens_B_T, attention_mask=mask.long(), position_ids=position_ids_from_mask(mask), use_cache=False,
    )
    # a token counts only when it and the token before it are real (left pads give no context)
    m = mask.to(torch.float32)
    real = m[:, 1:] * m[:, :-1]
    keep, others = real, None
    if positions_B_T is not None:
        wanted = positions_B_T[:, 1:].to(real.device) != 0
        keep, others = real * wanted, (real * ~wanted if rest else None)
    lp = pick_logprobs(
        route, states[:, :-1], tokens_B_T[:, 1:], keep if route is not None or others is not None else None,
        rest_B_S=others, temperature=temperature, autocast=autocast,
    )
    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
    filled = keep if others is None else keep + others
    return lp * torch.cat([torch.zeros_like(filled[:, :1]), filled], dim=1)


def to_tensor(x: Any, *, dtype: torch.dtype, device: torch.device | None = None) -> torch.Tensor:
    """numpy / list / tensor -> tensor of ``dtype`` on ``device``."""
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype)
    return torch.as_tensor(x, dtype=dtype, device=device)


__all__: Sequence[str] = (
    "TINY",
    "TINY_CONFIG",
    "LoraSpec",
    "atomic_dir",
    "ModelLoadError",
    "PolicyModel",
    "accepts_kwarg",
    "build_tiny_model",
    "cache_kwarg",
    "cache_root",
    "check_vocab",
    "load_model",
    "position_ids_from_mask",
    "resolve_model",
    "sequence_logprobs",
    "tiny_config",
    "tiny_fingerprint",
    "to_tensor",
)
