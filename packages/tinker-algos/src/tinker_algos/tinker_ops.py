"""Tinker's training API in tinker_algos terms: its data alignment, loss keys, Adam and sampling
defaults and stop reasons, as pure functions.

A Tinker ``Datum`` is next-token aligned: ``tokens = seq[:-1]``, ``target_tokens = seq[1:]``, and
every per-position field (``loss_weights``, ``advantages``, ``sampling_logprobs``) has one entry
per target. tinker_algos trains on right-padded :class:`tinker_core.contracts.Batch` rows over the
whole sequence, where position ``t`` of a ``*_B_T`` array belongs to token ``t`` (predicted from
``t - 1``). :func:`datum_batch` and :func:`per_datum_logprobs` convert between the two;
:func:`loss_config`, :func:`adam_step_args` and :func:`sampling_params` map Tinker's request
fields onto the registered losses, :meth:`tinker_algos.training.trainer.Trainer.optim_step` and
:class:`tinker_algos.sampling.sampler.SamplingParams`.

Bad input raises :class:`ValueError` naming the field (``data[1].target_tokens: ...``), so a
server can return it as an invalid-argument error unchanged. :func:`check_data`,
:func:`check_sequences` and :func:`check_sample` bound a request before any work: every sequence
within the model's :func:`context_length`, and (given :class:`RequestLimits`) the data, tokens and
new tokens of one request. The model host of tinker-scheduler
(``tinker_scheduler.model_host``) serves the TrainingService with these.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tinker_core.contracts import Batch

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

    from tinker_algos.model.models import PolicyModel
    from tinker_algos.sampling.sampler import SampledSequence, SamplingParams

#: Tinker's default PPO clip thresholds on the ratio (``eps_low = 1 - low``, ``eps_high = high - 1``).
TINKER_CLIP_LOW = 0.8
TINKER_CLIP_HIGH = 1.2
#: Tinker's default ``(clip_low_threshold, clip_high_threshold)`` per loss: CISPO clips one side;
#: GSPO takes PPO's thresholds on its sequence ratio.
TINKER_CLIPS = {"ppo": (TINKER_CLIP_LOW, TINKER_CLIP_HIGH), "cispo": (0.0, 4.0),
                "gspo": (TINKER_CLIP_LOW, TINKER_CLIP_HIGH)}
#: Tinker's ``AdamParams`` defaults, used where a field is 0 (unset on the wire).
ADAM_DEFAULTS = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-12}
#: :class:`tinker_algos.sampling.sampler.Sample` stop reasons -> Tinker's (``length``, ``stop_token``, ``stop_string``).
STOP_REASONS = {"length": "length", "eos": "stop_token", "stop_id": "stop_token", "stop_string": "stop_string"}
#: The per-position fields of a datum and their value where a datum leaves one out.
PER_POSITION_DEFAULTS = {"loss_weights": 1.0, "advantages": 0.0, "sampling_logprobs": 0.0}


@dataclass(frozen=True)
class RequestLimits:
    """The most one training request may ask for (checked before any work is queued)."""

    #: Data per Forward/ForwardBackward, sequences per ComputeLogprobs, and sequences sampled
    #: (prompts x num_samples) per Sample.
    max_data: int = 1024
    #: Tokens per request: the model inputs of all data or sequences; for Sample, the prompt
    #: plus ``max_tokens`` of every sequence sampled.
    max_tokens: int = 65_536
    #: Sample's ``max_tokens`` (new tokens per sequence).
    max_new_tokens: int = 8192


#: Model config attributes that give the longest sequence a model takes, in order of preference.
CONTEXT_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_length(model_config: PretrainedConfig) -> int | None:
    """The longest sequence (in tokens) a model takes, from its Hugging Face config; None if unknown."""
    for key in CONTEXT_LENGTH_KEYS:
        value = getattr(model_config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _check_inputs(field: str, inputs: Sequence[int], context: int | None, limits: RequestLimits | None, what: str) -> None:
    """Model input lengths ``inputs`` of request field ``field``, one per datum or sequence."""
    if limits is not None and len(inputs) > limits.max_data:
        raise ValueError(
            f"{field}: {len(inputs)} {field} in one request, over the limit of {limits.max_data}; split them into several requests"
        )
    for i, n in enumerate(inputs):
        if context is not None and n > context:
            raise ValueError(
                f"{field}[{i}]: {what} of {n} tokens exceeds the model's context length of {context} tokens; shorten or split it"
            )
    total = sum(inputs)
    if limits is not None and total > limits.max_tokens:
        raise ValueError(
            f"{field}: {total} tokens in one request, over the limit of {limits.max_tokens}; split them into several requests"
        )


def check_data(token_counts: Sequence[int], context: int | None, limits: RequestLimits | None = None) -> None:
    """Bound Forward/ForwardBackward data by their ``len(tokens)``: each datum's model input (its
    tokens and last target) within the context length ``context``, and (with ``limits``) the data
    count and total tokens. Raises :class:`ValueError` naming the field and the limit."""
    _check_inputs("data", [n + 1 for n in token_counts], context, limits, "tokens plus the last target")


def check_sequences(lengths: Sequence[int], context: int | None, limits: RequestLimits | None = None) -> None:
    """Bound ComputeLogprobs sequences as :func:`check_data` bounds data."""
    _check_inputs("sequences", list(lengths), context, limits, "a sequence")


def check_sample(
    prompt_lengths: Sequence[int], max_tokens: int, num_samples: int, context: int | None,
    limits: RequestLimits | None = None,
) -> None:
    """Bound a Sample request: every prompt plus ``max_tokens`` within the context length, and (with
    ``limits``) ``max_tokens``, the sequences sampled and their tokens. Raises :class:`ValueError`."""
    if limits is not None and max_tokens > limits.max_new_tokens:
        raise ValueError(f"sampling_params.max_tokens: {max_tokens} is over the limit of {limits.max_new_tokens}")
    n = max(1, int(num_samples))
    if limits is not None and len(prompt_lengths) * n > limits.max_data:
        raise ValueError(
            f"num_samples: {len(prompt_lengths)} prompt(s) x {n} samples = {len(prompt_lengths) * n} sequences, "
            f"over the limit of {limits.max_data}; sample in several requests"
        )
    for i, p in enumerate(prompt_lengths):
        if context is not None and p + max_tokens > context:
            raise ValueError(
                f"prompts[{i}]: {p} prompt tokens + sampling_params.max_tokens={max_tokens} exceed the model's "
                f"context length of {context} tokens; shorten the prompt or lower max_tokens"
            )
    total = sum(p + max_tokens for p in prompt_lengths) * n
    if limits is not None and total > limits.max_tokens:
        raise ValueError(
            f"prompts: {total} tokens to sample in one request (prompts plus max_tokens, x num_samples), over the "
            f"limit of {limits.max_tokens}; sample in several requests"
        )


def per_position(datum: Mapping[str, Any], i: int, T: int, name: str, default: float) -> np.ndarray:
    """Datum ``i``'s per-position field ``name`` (length ``T``), or ``default`` everywhere if absent."""
    value = np.asarray(datum.get(name, ()), dtype=np.float32)
    if value.size == 0:
        return np.full(T, default, dtype=np.float32)
    if value.shape != (T,):
        raise ValueError(f"data[{i}].{name}: has {value.size} entries for {T} tokens; send one per token or none")
    return value


def datum_batch(
    data: Sequence[Mapping[str, Any]], loss_fn: str | None, pad_token_id: int
) -> tuple[Batch, dict[str, np.ndarray]]:
    """Tinker-aligned data -> a right-padded :class:`Batch` over ``tokens + [last target]``.

    Returns the batch and the extra loss inputs (``weights_B_T`` for ``cross_entropy``, whose
    loss is ``-w * logprob`` summed with the weights as the mask: weights of 1 avoid ``w**2``; for
    ``gspo``, ``weights_B_T`` is Tinker's ``sequence_ratio_mask``, the tokens of the sequence
    ratio, defaulting to the trained tokens).
    """
    if not data:
        raise ValueError("data: is empty; send at least one Datum")
    rows: list[tuple[np.ndarray, ...]] = []
    for i, d in enumerate(data):
        tokens = np.asarray(d.get("tokens", ()), dtype=np.int64)
        targets = np.asarray(d.get("target_tokens", ()), dtype=np.int64)
        T = len(tokens)
        if T == 0:
            raise ValueError(f"data[{i}].tokens: is empty")
        if len(targets) != T:
            raise ValueError(
                f"data[{i}].target_tokens: has {len(targets)} entries for {T} tokens; for "
                "next-token training send tokens = seq[:-1] and target_tokens = seq[1:]"
            )
        if T > 1 and not np.array_equal(targets[:-1], tokens[1:]):
            bad = int(np.nonzero(targets[:-1] != tokens[1:])[0][0])
            raise ValueError(
                f"data[{i}].target_tokens[{bad}] = {targets[bad]} but tokens[{bad + 1}] = {tokens[bad + 1]}; "
                "target_tokens must be tokens shifted left by one (seq[1:] for tokens = seq[:-1])"
            )
        fields = [per_position(d, i, T, name, default) for name, default in PER_POSITION_DEFAULTS.items()]
        rows.append((np.concatenate([tokens, targets[-1:]]), *fields))
    B, L = len(rows), max(len(r[0]) for r in rows)
    tokens_B_L = np.full((B, L), pad_token_id, dtype=np.int64)
    attn_B_L = np.zeros((B, L), dtype=np.float32)
    mask_B_L = np.zeros((B, L), dtype=np.float32)
    adv_B_L = np.zeros((B, L), dtype=np.float32)
    slp_B_L = np.zeros((B, L), dtype=np.float32)
    ratio_B_L = np.zeros((B, L), dtype=np.float32)
    for b, (full, w, a, s) in enumerate(rows):
        n = len(full)
        tokens_B_L[b, :n] = full
        attn_B_L[b, :n] = 1.0
        mask_B_L[b, 1:n] = w  # position t of the datum predicts full[t + 1]
        adv_B_L[b, 1:n] = a
        slp_B_L[b, 1:n] = s
        if loss_fn == "gspo":
            ratio_B_L[b, 1:n] = per_position(data[b], b, n - 1, "sequence_ratio_mask", 1.0) * (w != 0)
    batch = Batch(
        tokens_B_T=tokens_B_L, attention_mask_B_T=attn_B_L, loss_mask_B_T=mask_B_L,
        sampler_logprobs_B_T=slp_B_L, rewards_B=np.zeros(B, np.float32), group_ids_B=np.arange(B),
        advantages_B_T=adv_B_L,
    )
    extra: dict[str, np.ndarray] = {}
    if loss_fn == "cross_entropy":
        extra["weights_B_T"] = (mask_B_L != 0).astype(np.float32)
    elif loss_fn == "gspo":
        extra["weights_B_T"] = ratio_B_L
    return batch, extra


def per_datum_logprobs(logprobs_B_T: np.ndarray, lengths: Sequence[int]) -> list[list[float]]:
    """Logprobs of a :func:`datum_batch` in the Tinker alignment: datum ``b`` position ``t`` is
    log p(target ``t``), ``lengths[b]`` of them."""
    return [logprobs_B_T[b, 1 : n + 1].astype(np.float32).tolist() for b, n in enumerate(lengths)]


def sequence_batch(sequences: Sequence[Sequence[int]], pad_token_id: int) -> Batch:
    """Whole token sequences -> a right-padded :class:`Batch` (every real token in the mask)."""
    if not sequences:
        raise ValueError("sequences: is empty")
    B, L = len(sequences), max(len(s) for s in sequences)
    if L == 0:
        raise ValueError("sequences: every sequence is empty")
    tokens_B_L = np.full((B, L), pad_token_id, dtype=np.int64)
    attn_B_L = np.zeros((B, L), dtype=np.float32)
    for b, s in enumerate(sequences):
        tokens_B_L[b, : len(s)] = s
        attn_B_L[b, : len(s)] = 1
    return Batch(tokens_B_L, attn_B_L, attn_B_L.copy(), np.zeros_like(attn_B_L), np.zeros(B, np.float32), np.arange(B))


def sequence_logprobs(logprobs_B_T: np.ndarray, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
    """Logprobs of a :func:`sequence_batch`: ``len(seq) - 1`` per sequence (the first token has none)."""
    return [logprobs_B_T[b, 1 : len(s)].astype(np.float32).tolist() for b, s in enumerate(sequences)]


def tokenizer_id(name_or_path: str) -> str:
    """What a Tinker client's ``AutoTokenizer.from_pretrained`` loads for a model loaded from
    ``name_or_path`` (``get_info``'s ``tokenizer_id``): the absolute directory the tokenizer was
    read from for ``tiny``, a registry preset or a local directory (loadable offline on the same
    machine; elsewhere ``opentinker model export-tokenizer`` writes a copy), the hub id for a hub
    model."""
    from tinker_algos.model.model_files import resolve_model

    resolved = resolve_model(name_or_path)
    path = Path(resolved).expanduser()
    return str(path.resolve()) if path.is_dir() else resolved


def loss_config(loss_fn: str, config: Mapping[str, float]) -> dict[str, Any]:
    """Tinker's ``loss_fn_config`` -> keyword arguments of the registered loss ``loss_fn``.

    ``ppo`` and ``cispo`` take Tinker's ratio thresholds ``clip_low_threshold`` and
    ``clip_high_threshold`` (``eps_low = 1 - low``, ``eps_high = high - 1``); a threshold left
    out gets Tinker's default (:data:`TINKER_CLIPS`) and ``ppo`` gets no dual clip, as in
    Tinker. ``gspo`` takes the same thresholds on its sequence ratio (PPO's defaults). A config
    in our own keys (``eps_low``, ``eps_high``, ``dual_clip``) passes through, with ``dual_clip =
    0`` meaning none. ``dro`` takes ``beta``; ``stable_reinforce`` takes ``kl_coeff``,
    ``ratio_low`` and ``ratio_high``. Other keys pass through as
    floats (the loss refuses unknown ones).
    """
    import tinker_core.registry

    try:
        tinker_core.registry.get_loss(loss_fn)
    except Exception as e:  # noqa: BLE001 - UnknownNameError names close matches
        raise ValueError(f"loss_fn: {e}") from None
    cfg: dict[str, Any] = {k: float(v) for k, v in config.items()}
    if loss_fn in TINKER_CLIPS:
        own_keys = {"eps_low", "eps_high", "dual_clip"} & set(cfg)
        defaults = dict(zip(("clip_low_threshold", "clip_high_threshold"), TINKER_CLIPS[loss_fn], strict=True))
        for key, default in defaults.items():
            if key not in cfg and own_keys:
                continue
            value = cfg.pop(key, default)
            low = key == "clip_low_threshold"
            if not (0.0 <= value <= 1.0 if low else value >= 1.0):
                raise ValueError(f"loss_fn_config.{key}: must be {'in [0, 1]' if low else '>= 1'} (got {value})")
            cfg["eps_low" if low else "eps_high"] = 1.0 - value if low else value - 1.0
        if loss_fn == "ppo" and cfg.get("dual_clip", None if own_keys else 0.0) == 0.0:
            cfg["dual_clip"] = None
    return cfg


def evaluate_loss(
    logprobs_B_T: np.ndarray, batch: Batch, extra: Mapping[str, np.ndarray], loss_fn: str, cfg: Mapping[str, Any]
) -> dict[str, float]:
    """The registered loss ``loss_fn`` over a :func:`datum_batch` without gradients, summed over
    tokens: ``loss``, ``loss:sum``, ``num_tokens`` and the loss's own metrics as ``<loss_fn>/<name>``.

    Raises :class:`ValueError` when the loss rejects ``cfg``.
    """
    import torch

    import tinker_core.registry
    from tinker_core.contracts import LossInputs

    mask_B_T = torch.as_tensor(batch.loss_mask_B_T * batch.attention_mask_B_T)
    inputs = LossInputs(
        logprobs_B_T=torch.as_tensor(logprobs_B_T), mask_B_T=mask_B_T,
        sampling_logprobs_B_T=torch.as_tensor(batch.sampler_logprobs_B_T),
        advantages_B_T=torch.as_tensor(batch.advantages_B_T),
        **{k: torch.as_tensor(v) for k, v in extra.items()},
    )
    try:
        with torch.no_grad():
            out = tinker_core.registry.get_loss(loss_fn).obj(inputs, **cfg)
    except (TypeError, ValueError) as e:
        raise ValueError(f"loss {loss_fn!r}: {e}") from None
    on_B_T = mask_B_T != 0
    total = float(torch.where(on_B_T, out.loss_B_T * mask_B_T, torch.zeros(())).sum())
    metrics = {"loss": total, "loss:sum": total, "num_tokens": float(mask_B_T.sum())}
    metrics.update({f"{loss_fn}/{k}": float(v) for k, v in (out.metrics or {}).items()})
    return metrics


def adam_step_args(adam: Mapping[str, float]) -> tuple[dict[str, Any], float | None]:
    """Tinker's ``AdamParams`` -> (keyword arguments of ``Trainer.optim_step``, max grad norm).

    0 (unset) means :data:`ADAM_DEFAULTS` for ``beta1``, ``beta2`` and ``eps``, no weight decay
    and no gradient clipping (``None``); ``learning_rate`` must be set.
    """
    lr = float(adam.get("learning_rate", 0.0))
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"adam.learning_rate: must be > 0 (got {lr})")
    b1 = float(adam.get("beta1") or ADAM_DEFAULTS["beta1"])
    b2 = float(adam.get("beta2") or ADAM_DEFAULTS["beta2"])
    eps = float(adam.get("eps") or ADAM_DEFAULTS["eps"])
    wd = float(adam.get("weight_decay") or 0.0)
    clip = float(adam.get("grad_clip_norm") or 0.0)
    for name, value, ok in (("beta1", b1, 0 <= b1 < 1), ("beta2", b2, 0 <= b2 < 1), ("eps", eps, eps > 0),
                            ("weight_decay", wd, wd >= 0), ("grad_clip_norm", clip, clip >= 0)):
        if not ok:
            raise ValueError(f"adam.{name}: {value} is out of range")
    return {"lr": lr, "betas": (b1, b2), "eps": eps, "weight_decay": wd}, (clip if clip > 0 else None)


def sampling_params(params: Mapping[str, Any], num_samples: int) -> SamplingParams:
    """Tinker's ``SamplingParams`` fields -> a validated :class:`tinker_algos.sampling.sampler.SamplingParams`."""
    from tinker_algos.sampling.sampler import SamplingParams

    sp = SamplingParams(
        max_new_tokens=int(params.get("max_tokens", 0)),
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        top_k=int(params.get("top_k", 0)),
        n=max(1, int(num_samples)),
        stop=list(params.get("stop", ())),
        stop_token_ids=list(params.get("stop_token_ids", ())),
        seed=params.get("seed"),
    )
    try:
        sp.validate()
    except (TypeError, ValueError) as e:
        raise ValueError(f"sampling_params: {e}".replace("SamplingParams.max_new_tokens", "max_tokens")) from None
    return sp


def sampled_sequences(rows: Sequence[Sequence[SampledSequence]]) -> list[list[dict[str, Any]]]:
    """``sample()`` output (per prompt, per sample) -> Tinker's sequences with Tinker's stop reasons."""
    return [
        [{"tokens": s.tokens, "logprobs": s.logprobs, "stop_reason": STOP_REASONS[s.stop_reason]} for s in row]
        for row in rows
    ]


#: Tinker's filler for an empty top-k cell (token id 0 with this logprob).
MASK_LOGPROB = -99999.0


def score_tokens(
    policy: PolicyModel, sequences: Sequence[Sequence[int]], topk: int = 0, *, adapter: str | None = None, base: bool = False
) -> list[dict[str, np.ndarray]]:
    """Each sequence's own logprobs and (``topk > 0``) its ``topk`` likeliest tokens per position.

    Per sequence of ``n`` tokens: ``logprobs`` (float32 ``[n]``, ``log p(seq[t] | seq[:t])`` at
    temperature 1, NaN at position 0, which has no context) and, with ``topk``, ``topk_ids``
    (int32 ``[n, k]``) and ``topk_logprobs`` (float32 ``[n, k]``, best first; row 0 holds Tinker's
    empty cells: id 0, :data:`MASK_LOGPROB`). Scored with ``adapter`` active, or with every
    adapter off when ``base``; one forward pass per sequence, in eval mode, without gradients.
    """
    import torch

    module = policy.module
    adapters = policy.adapters_disabled() if base else policy.using_adapter(adapter)
    out: list[dict[str, np.ndarray]] = []
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad(), adapters:
            for seq in sequences:
                ids = torch.as_tensor([list(map(int, seq))], dtype=torch.long, device=policy.device)
                with policy.spec.autocast():
                    logits = module(input_ids=ids, use_cache=False).logits[0, :-1].float()
                logp = torch.log_softmax(logits, dim=-1)
                n = ids.shape[1]
                lp = np.full(n, np.nan, dtype=np.float32)
                lp[1:] = logp.gather(-1, ids[0, 1:, None])[:, 0].cpu().numpy()
                row = {"logprobs": lp}
                if topk > 0:
                    k = min(int(topk), logp.shape[-1])
                    values, indices = logp.topk(k, dim=-1)
                    row["topk_ids"] = np.zeros((n, k), dtype=np.int32)
                    row["topk_logprobs"] = np.full((n, k), MASK_LOGPROB, dtype=np.float32)
                    row["topk_ids"][1:] = indices.cpu().numpy()
                    row["topk_logprobs"][1:] = values.cpu().numpy()
                out.append(row)
    finally:
        module.train(was_training)
    return out


def tokenizer_files(tokenizer: PreTrainedTokenizerBase) -> dict[str, np.ndarray]:
    """A tokenizer's saved files (``tokenizer.json`` ...) as uint8 arrays, by file name."""
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        return {
            f.name: np.frombuffer(f.read_bytes(), dtype=np.uint8).copy()
            for f in sorted(Path(tmp).iterdir()) if f.is_file()
        }
