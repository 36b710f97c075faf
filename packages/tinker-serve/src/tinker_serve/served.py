"""What a server serves: one base model and its LoRA adapters, each under a model name.

:class:`ServedModels` loads the base (:meth:`tinker_algos.model.models.PolicyModel.load`: ``tiny``, a
registry preset such as ``smollm2-135m-instruct``, a local directory or a hub id; the device and
precision are chosen at run time, :func:`tinker_algos.model.device.resolve_device`), renders chat
messages with the model's chat template (:class:`tinker_algos.model.prompts.PromptRenderer`) and runs
an :class:`~tinker_serve.engine.Engine`. Adapters come from whatever
:func:`tinker_algos.commands.evaluation.find_source` resolves: an ``opentinker train`` run directory
(its newest intact checkpoint), a checkpoint directory, or a saved PEFT adapter. They are loaded
and removed while the server runs (an adapter still generating is removed when its last request
ends).
"""

from __future__ import annotations

import functools
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path

from tinker_algos.model.models import PolicyModel
from tinker_algos.model.prompts import PromptRenderer
from tinker_serve.engine import Engine
from tinker_serve.protocol import APIError, bad_request

SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


@dataclass
class ServedModel:
    """A model name: the adapter it runs (None: the base) and where it came from."""

    name: str
    adapter: str | None
    source: str
    created: int


def prompt_char_bound(tokenizer: object, max_positions: int | None) -> int | None:
    """The most characters a prompt of at most ``max_positions`` tokens can have: the context
    length times the longest token of ``tokenizer``'s vocabulary; None when either is unknown."""
    vocab = getattr(tokenizer, "get_vocab", None)
    if max_positions is None or vocab is None:
        return None
    try:
        longest = max((len(t) for t in vocab()), default=0)
    except Exception:  # noqa: BLE001 - a tokenizer without a listable vocabulary: no bound
        return None
    return max_positions * max(1, longest) if longest else None


class ServedModels:
    """The base model, its adapters by name, the chat renderer and the engine."""

    def __init__(self, policy: PolicyModel, name: str, *, chat_template: str = "auto", max_batch: int = 32) -> None:
        self.policy = policy
        self.base_name = name
        self.renderer = PromptRenderer.from_config(policy.tokenizer, chat_template, field="--chat-template")
        self.engine = Engine(policy, max_batch=max_batch, extra_eos_ids=self.renderer.extra_eos_ids)
        self.models: dict[str, ServedModel] = {name: ServedModel(name, None, policy.model_id, int(time.time()))}
        self._ids = itertools.count(1)

    @classmethod
    def load(
        cls, model: str, *, name: str | None = None, device: str | None = None, precision: str | None = None,
        chat_template: str = "auto", max_batch: int = 32,
    ) -> ServedModels:
        """Load ``model`` (see the module docstring); ModelLoadError/DeviceError when it cannot."""
        policy = PolicyModel.load(model, device=device, precision=precision)
        return cls(policy, name or model, chat_template=chat_template, max_batch=max_batch)

    @property
    def max_positions(self) -> int | None:
        return self.engine.max_positions

    @functools.cached_property
    def max_prompt_chars(self) -> int | None:
        """The most characters a prompt that fits the context can have: the context length times
        the longest token in the vocabulary (a token never covers more characters than its own
        text has); None when either is unknown. Checked before tokenizing, so a huge prompt is
        refused without the work (and memory) of encoding it."""
        return prompt_char_bound(self.policy.tokenizer, self.max_positions)

    def get(self, name: str) -> ServedModel:
        served = self.models.get(name)
        if served is None:
            raise APIError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")
        return served

    def load_adapter(self, name: str, path: str | Path) -> ServedModel:
        """Serve the adapter at ``path`` as model ``name`` (a 400 :class:`APIError` says why not)."""
        from tinker_algos.commands.evaluation import EvalError, find_source

        if name in self.models:
            raise bad_request(f"The model `{name}` is already served; unload it first or pick another name", "lora_name")
        if any(c.isspace() for c in name):
            raise bad_request(f"lora_name {name!r} contains whitespace", "lora_name")
        try:
            source = find_source(path)
        except EvalError as e:
            raise bad_request(str(e), "lora_path") from None
        if source.weights != "adapter":
            raise bad_request(
                f"{path} holds full model weights, not a LoRA adapter; serve it as the base model: opentinker serve {path}",
                "lora_path",
            )
        self._check_base(source.base_model, path)
        try:  # in a scratch copy first: the files read and every tensor fits the served model
            check_adapter_files(self.policy, source.weights_dir)
        except Exception as e:  # noqa: BLE001 - whatever the files hold, the engine stays as it was
            raise bad_request(f"cannot load the adapter at {path} onto {self.base_name}: {type(e).__name__}: {e}", "lora_path") from None
        adapter = f"serve-{next(self._ids)}"
        with self.engine.lock:
            was_peft = self.policy.is_peft
            try:
                self.policy.load_adapter(adapter, source.weights_dir)
            except Exception as e:  # noqa: BLE001 - undo whatever the load did, then say why
                _undo_adapter(self.policy, adapter, was_peft)
                raise bad_request(f"cannot load the adapter at {path} onto {self.base_name}: {type(e).__name__}: {e}", "lora_path") from None
            self.policy.module.eval()
        served = ServedModel(name, adapter, str(source.weights_dir), int(time.time()))
        self.models[name] = served
        return served

    def _check_base(self, recorded: str | None, path: str | Path) -> None:
        """Refuse an adapter trained on another base model: when the base it records resolves to
        a local model whose shape (``config.json``) differs from the served one."""
        from tinker_algos.model.model_files import ModelLoadError, resolve_model

        if not recorded:
            return
        try:
            configs = [Path(resolve_model(n)) / "config.json" for n in (self.policy.model_id, recorded)]
            shapes = [{k: json.loads(c.read_text()).get(k) for k in SHAPE_KEYS} for c in configs]
        except (ModelLoadError, OSError, ValueError):
            return  # a name that does not resolve here (e.g. an uncached hub id): loading decides
        if shapes[0] != shapes[1]:
            raise bad_request(
                f"the adapter at {path} was trained on {recorded!r}, a different model than the served "
                f"{self.policy.model_id!r}; serve it with: opentinker serve {recorded} --adapter NAME={path}",
                "lora_path",
            )

    def unload_adapter(self, name: str) -> None:
        served = self.models.get(name)
        if served is None or served.adapter is None:
            what = "is the base model, which cannot be unloaded" if served else "is not loaded"
            raise APIError(404 if served is None else 400, f"The model `{name}` {what}.", param="lora_name",
                           code="model_not_found" if served is None else None)
        del self.models[name]
        self.engine.retire_adapter(served.adapter)


def check_adapter_files(policy: PolicyModel, directory: Path) -> None:
    """Read a PEFT adapter directory's config and weights apart from the served model and check
    that every LoRA tensor names a module of ``policy``'s base model with matching shapes;
    raises (any exception) when the adapter cannot join."""
    from peft import PeftConfig

    cfg = PeftConfig.from_pretrained(str(directory))
    rank = int(getattr(cfg, "r", 0) or 0)
    weights = directory / "adapter_model.safetensors"
    if weights.is_file():
        from safetensors.torch import load_file

        tensors = load_file(str(weights), device="cpu")
    else:
        import torch

        tensors = torch.load(str(directory / "adapter_model.bin"), map_location="cpu", weights_only=True)
    if not isinstance(tensors, dict) or not tensors:
        raise ValueError("the adapter holds no tensors")
    modules = dict(policy.base_model.named_modules())
    for key, tensor in tensors.items():
        for part, dim in ((".lora_A.", 1), (".lora_B.", 0)):
            if part not in key:
                continue
            name = key.split(part)[0].removeprefix("base_model.model.")
            module = modules.get(name)
            module = getattr(module, "base_layer", module)
            want = {1: getattr(module, "in_features", None), 0: getattr(module, "out_features", None)}[dim]
            if module is None or want is None:
                raise ValueError(f"{key}: the served model has no linear module {name!r}")
            shape = tuple(tensor.shape)
            if len(shape) != 2 or shape[dim] != want or (rank and not getattr(cfg, "rank_pattern", None)
                                                          and shape[1 - dim] != rank):
                raise ValueError(f"{key}: shape {shape} does not fit {name!r} (rank {rank}, {want} features)")


def _undo_adapter(policy: PolicyModel, adapter: str, was_peft: bool) -> None:
    """Leave ``policy`` as it was before a failed load of ``adapter``: its other adapters, or the
    plain base model (without the LoRA layers a failed first load may have injected)."""
    if was_peft:
        if adapter in policy.adapter_names:
            policy.remove_adapter(adapter)
        return
    from peft.tuners.tuners_utils import BaseTunerLayer

    model = policy.model.get_base_model() if policy.is_peft else policy.model
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, BaseTunerLayer):
                setattr(parent, child_name, child.get_base_layer())
    if hasattr(model, "peft_config"):
        del model.peft_config
    policy.model = model
    policy.lora_specs.pop(adapter, None)
