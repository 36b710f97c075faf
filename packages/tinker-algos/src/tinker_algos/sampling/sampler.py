"""Batched sampling with a KV cache, returning tokens, logprobs and why each sample stopped.

The decode loop is ours (not ``model.generate``): prompts are left-padded into one batch, the
prefill runs once, then each step feeds one token per row with a ``transformers.DynamicCache``
whose layers write into room reserved up front (:mod:`tinker_algos.sampling.turn_cache`).
A prefix all prompts share (a chat template's system prompt, the ``n`` copies of one prompt) is
computed once and its cache repeated for every row; only the last position's logits are computed.
Positions count only real tokens (:func:`tinker_algos.model.models.position_ids_from_mask`), so a
prompt's logprobs do not depend on how much padding its batch needed and agree with the trainer's
right-padded forward pass. With a :class:`tinker_algos.sampling.turn_cache.TurnCache` (a multi-turn rollout), a
prompt that extends a conversation sampled before starts from that conversation's keys and values
and prefills only its new tokens.

Logprobs. For each generated token the sampler reports two numbers:

* ``logprobs`` -- the log-probability under the distribution actually sampled from: logits
  divided by ``temperature``, then top-k and top-p filtering, renormalised. At ``temperature=1``
  without top-k/top-p this equals the raw logprob. With ``temperature=0`` (greedy) the sampled
  distribution is a point mass and the logprob is 0.
* ``raw_logprobs`` -- ``log softmax(logits)`` at temperature 1 with no filtering: the policy's own
  logprob, what :meth:`tinker_algos.training.trainer.Trainer.forward` recomputes.

Importance-sampling losses should use the one matching how the trainer scores tokens (the raw
one unless the trainer also divides by the sampling temperature).

Stopping. A row stops at the first of: a token in ``stop_token_ids`` (reason ``"stop_id"``), an
end-of-turn token when ``stop_at_eos`` (``"eos"``: the generation config's eos ids, the
tokenizer's eos, the end-of-turn token of its chat template such as ``<|im_end|>``, and
``eos_token_ids``; see :func:`tinker_algos.model.prompts.eos_token_ids`), a generated text containing
one of ``stop`` (``"stop_string"``), or ``max_new_tokens`` (``"length"``). The stopping token is
kept in ``tokens`` (it was sampled and has a logprob); ``text`` is the decode of ``tokens`` without
special tokens and without the end-of-turn token, so it ends with the stop string when one
matched. :data:`TURN_END_OF` maps a stop reason to what an env sees (:class:`tinker_core.env.Action`).
Padding: prompts are left-padded with the tokenizer's pad token (its eos when it has none); pad
positions are masked out of attention, so the pad id never matters, even when it equals eos.

Randomness: ``SamplingParams.seed`` seeds a private ``torch.Generator`` (same seed, same prompts,
same samples); with ``seed=None`` the global torch RNG is used (so :func:`seed_everything` and
checkpointed RNG state govern it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tinker_algos.model.models import (
    PolicyModel,
    accepts_kwarg,
    cache_kwarg,
    position_ids_from_mask,
)
from tinker_algos.records.health import logprob_agreement as logprob_agreement
from tinker_algos.sampling.decode_rows import (
    distinct_rows,
    left_padded,
    reason_codes,
    shared_prefix_len,
    stop_enders,
)
from tinker_algos.sampling.samples import SampledSequence as SampledSequence
from tinker_algos.sampling.samples import StopReason as StopReason
from tinker_algos.sampling.samples import sequences_to_batch as sequences_to_batch
from tinker_algos.sampling.token_draw import INVERSE_CDF_MIN_VOCAB as INVERSE_CDF_MIN_VOCAB
from tinker_algos.sampling.token_draw import (
    LogitsProcessorFactory,
    adjust_logits,
    adjusts,
    check_penalty,
    token_entropy_B,
)
from tinker_algos.sampling.token_draw import choose_tokens as choose_tokens
from tinker_algos.sampling.token_draw import draw as draw
from tinker_algos.sampling.turn_cache import (
    CachedPrefix,
    TurnCache,
    batch_cache,
    extract_rows,
    prefix_mask,
    reserve,
    reusable,
)
from tinker_core.engines import GenerationParams

if TYPE_CHECKING:
    from tinker_core.env import TurnEnd

TURN_END_OF: dict[str, TurnEnd] = {
    "eos": "end_of_turn", "stop_id": "end_of_turn", "stop_string": "stop_string", "length": "length", "abort": "length",
}
"""A sampler stop reason -> how the turn ended, as an env sees it (``Action.stop_reason``)."""
Prompt = str | Sequence[dict[str, str]] | Sequence[int]


@dataclass
class SamplingParams(GenerationParams):
    """How to sample: the engines' plain :class:`tinker_core.engines.GenerationParams` (``top_k=0``
    and ``top_p=1.0`` switch those filters off; ``eos_token_ids`` are more end-of-turn ids, reason
    ``"eos"``) and what only this sampler applies: OpenAI's penalties and logits processors."""

    frequency_penalty: float = 0.0  # OpenAI's, in [-2, 2]: :mod:`tinker_algos.sampling.token_draw`
    presence_penalty: float = 0.0
    logits_processors: Sequence[LogitsProcessorFactory] = ()  # one processor per row each (a grammar's mask)

    def validate(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"SamplingParams.temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {self.n}")
        if isinstance(self.stop, str):
            raise TypeError("SamplingParams.stop is a list of strings; wrap a single one: stop=[...]")
        if any(not s for s in self.stop):
            raise ValueError("SamplingParams.stop contains an empty string")
        check_penalty("frequency_penalty", self.frequency_penalty)
        check_penalty("presence_penalty", self.presence_penalty)


def _resolve_prompts(policy: PolicyModel, prompts: Sequence[Prompt] | Prompt, chat: bool | None) -> list[list[int]]:
    from tinker_algos.model.prompts import encode_prompt

    items: list[Any]
    if isinstance(prompts, str) or (
        isinstance(prompts, Sequence) and prompts and isinstance(prompts[0], int | dict)
    ):
        items = [prompts]
    else:
        items = list(prompts)
    out: list[list[int]] = []
    for i, p in enumerate(items):
        if isinstance(p, torch.Tensor | np.ndarray):
            p = [int(x) for x in p.tolist()]
        ids = encode_prompt(policy.tokenizer, p, chat=chat)
        if not ids:
            raise ValueError(f"prompt {i} encodes to no tokens; a prompt needs at least one token")
        out.append(ids)
    if not out:
        raise ValueError("sample() got no prompts")
    return out


@torch.no_grad()
def sample(
    policy: PolicyModel,
    prompts: Sequence[Prompt] | Prompt,
    params: SamplingParams | None = None,
    *,
    adapter: str | None = None,
    chat: bool | None = None,
    use_cache: bool = True,
    turn_cache: TurnCache | None = None,
    cache_keys: Sequence[Hashable] | None = None,
    store_cache: bool = True,
    on_step: Callable[[], bool] | None = None,
) -> list[list[SampledSequence]]:
    """Sample ``params.n`` continuations of each prompt; returns ``[prompt][sample]``.

    Args:
        policy: the model (with ``adapter`` active when given).
        prompts: strings (raw text; ``chat=True`` wraps each as a user message), chat message
            lists (rendered with the chat template) or token-id lists; or a single one of these.
        params: :class:`SamplingParams`.
        use_cache: False recomputes the whole sequence each step (a slow reference path).
        turn_cache: KV caches of earlier calls (:class:`tinker_algos.sampling.turn_cache.TurnCache`), one
            entry per ``cache_keys[i]`` (one key per prompt, e.g. an episode; ``params.n`` must be
            1): a prompt that extends its entry's tokens prefills only the rest; afterwards each
            entry holds the KV of its prompt and sample (all but the last token).
        store_cache: False when no prompt will be continued (an episode's last turn): the
            entries are read but not stored back (each key's entry is dropped instead).
        on_step: called after each decode step but the last (a rollout engine's pause gate); True
            ends the call: running rows keep their tokens, stop with ``"abort"``, drop their cache.
    """
    params = params or SamplingParams()
    params.validate()
    prompt_ids = _resolve_prompts(policy, prompts, chat)
    if turn_cache is not None:
        if params.n != 1:
            raise ValueError(f"sample(turn_cache=...) keeps one cache per prompt: params.n must be 1, got {params.n}")
        if cache_keys is None or len(cache_keys) != len(prompt_ids):
            raise ValueError(
                f"sample(turn_cache=...) needs one cache key per prompt: got {len(prompt_ids)} prompts and "
                f"{'no' if cache_keys is None else len(cache_keys)} keys"
            )
    rows = [(pi, si) for pi in range(len(prompt_ids)) for si in range(params.n)]
    ids_rows = [prompt_ids[pi] for pi, _ in rows]
    max_pos = getattr(policy.base_model.config, "max_position_embeddings", None)
    longest = max(len(r) for r in ids_rows)
    if max_pos is not None and longest + params.max_new_tokens > max_pos:
        raise ValueError(
            f"prompt of {longest} tokens + max_new_tokens={params.max_new_tokens} exceeds the "
            f"model's max_position_embeddings={max_pos}; shorten the prompt or lower max_new_tokens"
        )
    with policy.using_adapter(adapter):
        was_training = policy.module.training
        policy.module.eval()
        try:
            gen = _decode(policy, ids_rows, params, use_cache=use_cache, turn_cache=turn_cache, cache_keys=cache_keys,
                          store_cache=store_cache, on_step=on_step)
        finally:
            policy.module.train(was_training)
    tokens, lps, raws, reasons, ents = gen
    out: list[list[SampledSequence]] = [[] for _ in prompt_ids]
    texts: dict[tuple[int, ...], str] = {}  # samples repeat (short answers): decode each once
    for b, (pi, si) in enumerate(rows):
        shown = tuple(tokens[b][:-1] if reasons[b] == "eos" else tokens[b])  # no end-of-turn token in the text
        text = texts.get(shown)
        if text is None:
            text = texts[shown] = policy.tokenizer.decode(list(shown), skip_special_tokens=True, clean_up_tokenization_spaces=False)
        out[pi].append(
            SampledSequence(
                prompt_tokens=list(prompt_ids[pi]),
                tokens=tokens[b],
                logprobs=lps[b],
                raw_logprobs=raws[b],
                stop_reason=reasons[b],
                text=text,
                prompt_index=pi,
                sample_index=si,
                entropies=ents[b],
            )
        )
    return out


_MIN_SHARED_POSITIONS = 32  # share a common prefix when that saves at least this many token positions
REASON_CODES: tuple[StopReason | None, ...] = (None, "eos", "stop_id", "stop_string")
"""The codes the decode loop keeps per row: 0 = still running (ends as ``"length"``)."""


def _decode(
    policy: PolicyModel,
    ids_rows: list[list[int]],
    params: SamplingParams,
    *,
    use_cache: bool,
    turn_cache: TurnCache | None = None,
    cache_keys: Sequence[Hashable] | None = None,
    store_cache: bool = True,
    on_step: Callable[[], bool] | None = None,
) -> tuple[list[list[int]], list[list[float]], list[list[float]], list[StopReason], list[list[float]]]:
    """The decode loop (tokens, logprobs, raw logprobs, stop reasons, the policy's entropy at each
    token). Layout of each row: ``[shared prefix][pads][own prompt][generated]``.

    With the cache, the prefix every row shares (a chat template's system prompt, the ``n``
    copies of one prompt) is run once for one row and its KV cache repeated for the batch; pads
    sit after it and are masked out, and positions count real tokens only, so each row sees the
    same positions and tokens as alone. Prefill and decode compute the last position's logits
    only. Rows with the same prompt are prefilled once (one row each) and the cache copied to
    the others. Tokens, logprobs and stop state stay on the device; the host reads one flag per
    step (all rows done?) plus, with stop strings, which rows' new token can complete one (it
    decodes only those rows' last tokens).

    With a ``turn_cache`` (one key per row), the rows whose prompt extends their entry start
    from its keys and values (:mod:`tinker_algos.sampling.turn_cache`): the layout is then ``[left pads]
    [cached tokens][pads][new suffix][generated]`` and only the suffixes are prefilled. Each
    row's cache is stored back afterwards (with ``store_cache``; else its entry is dropped).
    """
    prefixes = None
    if turn_cache is not None and cache_keys is not None and use_cache:
        prefixes = [turn_cache.lookup(k, ids) for k, ids in zip(cache_keys, ids_rows, strict=True)]
    loop = _DecodeLoop(policy, ids_rows, params, use_cache=use_cache, prefixes=prefixes)
    steps, aborted = loop.N, False
    for step in range(loop.N):
        loop.step(step)
        if step + 1 < loop.N:
            if bool(loop.done_B.all()):
                steps = step + 1
                break
            if on_step is not None and on_step():
                steps, aborted = step + 1, True
                break
            loop.tokens_B_T[:, loop.P + loop.S + step] = loop.gen_B_N[:, step]
    result = loop.result(steps)
    if aborted:  # the rows still running end here
        done = loop.done_B.tolist()
        result = (*result[:3], [r if d else "abort" for r, d in zip(result[3], done, strict=True)], result[4])
    if turn_cache is not None and cache_keys is not None and (aborted or not store_cache):
        for key in cache_keys:
            turn_cache.drop(key)
    elif turn_cache is not None and cache_keys is not None:
        for key, entry in zip(cache_keys, loop.cached_rows(ids_rows, result[0], steps), strict=True):
            if entry is None:
                turn_cache.drop(key)
            else:
                turn_cache.store(key, entry)
    return result


class _DecodeLoop:
    """The state of one :func:`_decode` call: the batch laid out on the device, the model call,
    and what each row has generated so far (tokens, logprobs, stop reason, end)."""

    def __init__(
        self,
        policy: PolicyModel,
        ids_rows: list[list[int]],
        params: SamplingParams,
        *,
        use_cache: bool,
        prefixes: Sequence[CachedPrefix | None] | None = None,
    ) -> None:
        from transformers import DynamicCache

        from tinker_algos.model.prompts import eos_token_ids

        self.module, self.spec, self.tok, self.params, self.use_cache = policy.module, policy.spec, policy.tokenizer, params, use_cache
        device = self.spec.device
        B, N, pad = len(ids_rows), params.max_new_tokens, policy.pad_token_id
        # with cached prefixes, P is the width of the cached region (each row's right-aligned)
        self.cached = use_cache and prefixes is not None and any(p is not None for p in prefixes)
        cache: Any = DynamicCache()
        # rows with the same prompt (a GRPO group's copies) are prefilled once, their cache then copied
        self.first_of, self.row_of = list(range(B)), list(range(B))
        if self.cached:
            assert prefixes is not None
            lens = [len(p) if p is not None else 0 for p in prefixes]  # same prompt and same cached part: one prefill
            self.first_of, self.row_of = distinct_rows([[n, *r] for n, r in zip(lens, ids_rows, strict=True)])
            cache = batch_cache([prefixes[b] for b in self.first_of], device)  # its rows: the distinct ones
            mask_B_P = prefix_mask(prefixes, device)
            suffixes = [r[n:] for r, n in zip(ids_rows, lens, strict=True)]
            P, S = mask_B_P.shape[1], max(len(r) for r in suffixes)
            toks_B_T, mask_B_T = left_padded(suffixes, 0, S, N, pad, device)
            self.tokens_B_T = torch.cat([torch.full((B, P), pad, dtype=toks_B_T.dtype, device=device), toks_B_T], 1)
            self.mask_B_T = torch.cat([mask_B_P.to(mask_B_T.dtype), mask_B_T], 1)
        else:
            if use_cache:
                self.first_of, self.row_of = distinct_rows(ids_rows)
            P = shared_prefix_len(ids_rows) if use_cache and B > 1 else 0
            # distinct prompts are prefilled once each, so sharing saves P positions per distinct prompt but one
            if (len(self.first_of) - 1) * P < _MIN_SHARED_POSITIONS:  # too little to pay for a forward call of its own
                P = 0
            S = max(len(r) for r in ids_rows) - P  # width of the own-prompt region
            self.tokens_B_T, self.mask_B_T = left_padded(ids_rows, P, S, N, pad, device)
        self.B, self.N, self.P, self.S, self.pad = B, N, P, S, pad
        if use_cache:  # room for every column up front: no torch.cat of the whole cache per layer and step
            cache = reserve(cache, P + S + N)
        self.pos_B_T = position_ids_from_mask(self.mask_B_T)
        self.generator = None
        if params.seed is not None:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(int(params.seed))
        self.eos = eos_token_ids(self.tok, policy.base_model, params.eos_token_ids) if params.stop_at_eos else set()
        self.adjusted = adjusts(params)  # penalties or processors: drawn from adjusted logits
        self.processors_B = [[f() for f in params.logits_processors] for _ in range(B)]
        self.plain = params.temperature == 1.0 and params.top_k == 0 and params.top_p == 1.0 and not self.adjusted
        self.stops = tuple(params.stop)
        self.window = max((len(s) for s in self.stops), default=0) + 8  # tokens decoded per stop check
        self.cache_kw = {cache_kwarg(self.module): cache} if use_cache else {}
        self.last_only = {"logits_to_keep": 1} if accepts_kwarg(self.module, "logits_to_keep") else {}
        self.padded = not bool(self.mask_B_T.all())  # no pads: no mask to build and apply (SDPA's causal path)
        self.gen_B_N = torch.full((B, N), pad, dtype=torch.long, device=device)
        self.lp_B_N = torch.zeros((B, N), device=device)
        self.raw_B_N = torch.zeros((B, N), device=device)
        self.ent_B_N = torch.zeros((B, N), device=device)
        self.reason_B = torch.zeros(B, dtype=torch.long, device=device)  # index into REASON_CODES
        self.done_B = torch.zeros(B, dtype=torch.bool, device=device)
        self.end_B = torch.full((B,), N, dtype=torch.long, device=device)
        self.code_V: torch.Tensor | None = None  # per vocabulary id: its stop reason code
        self.can_end_V: torch.Tensor | None = None  # per vocabulary id: whether it can end a stop string
        if P and not self.cached:  # the shared prefix once, its cache repeated for every (distinct) row
            with self.spec.autocast():
                self.module(
                    input_ids=self.tokens_B_T[:1, :P], attention_mask=None, position_ids=self.pos_B_T[:1, :P],
                    use_cache=True, **self.cache_kw, **self.last_only,
                )
            next(iter(self.cache_kw.values())).batch_repeat_interleave(len(self.first_of))

    def forward(self, lo: int, hi: int, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (float) at column ``hi - 1`` after feeding columns ``lo:hi`` (all of them without
        cache) of every row, or of ``rows`` only."""
        lo = lo if self.use_cache else 0
        toks, mask, pos = (self.tokens_B_T, self.mask_B_T, self.pos_B_T)
        if rows is not None:
            toks, mask, pos = toks[rows], mask[rows], pos[rows]
        with self.spec.autocast():
            out = self.module(
                input_ids=toks[:, lo:hi], attention_mask=mask[:, :hi] if self.padded else None,
                position_ids=pos[:, lo:hi],
                use_cache=self.use_cache, **self.cache_kw, **self.last_only,
            )
        return out.logits[:, -1].float()

    def logits(self, step: int) -> torch.Tensor:
        """The next-token logits of every row at ``step`` (the first step prefills each distinct prompt once)."""
        col = self.P + self.S + step  # the column the new token goes to
        if step == 0 and len(self.first_of) < self.B:
            rows_U = torch.tensor(self.first_of, dtype=torch.long, device=self.spec.device)
            row_of_B = torch.tensor(self.row_of, dtype=torch.long, device=self.spec.device)
            logits_B_V = self.forward(self.P, col, rows_U)[row_of_B]
            next(iter(self.cache_kw.values())).reorder_cache(row_of_B)
            return logits_B_V
        return self.forward(self.P if step == 0 else col - 1, col)

    def choose(self, logits_B_V: torch.Tensor, step: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(next_B, logprobs_B, raw_logprobs_B, entropy_B)``: one token per row, drawn as
        ``params`` say (after penalties and processors, :mod:`tinker_algos.sampling.token_draw`),
        and the entropy of the raw distribution (the policy's, before them) it was drawn at."""
        raw_B_V = torch.log_softmax(logits_B_V, dim=-1)
        if self.adjusted:
            generated_B = self.gen_B_N[:, :step].tolist()
            drawn_B_V = adjust_logits(
                logits_B_V, generated_B, frequency_penalty=self.params.frequency_penalty,
                presence_penalty=self.params.presence_penalty, processors_B=self.processors_B,
            )
            next_B, lp_B = choose_tokens(drawn_B_V, self.params, self.generator)
            return next_B, lp_B, raw_B_V.gather(-1, next_B[:, None]).squeeze(-1), token_entropy_B(raw_B_V)
        if self.plain:  # the sampled distribution is the raw one: one log_softmax
            next_B = draw(raw_B_V, self.generator)
            raw_B = raw_B_V.gather(-1, next_B[:, None]).squeeze(-1)
            return next_B, raw_B, raw_B, token_entropy_B(raw_B_V)
        next_B, lp_B = choose_tokens(logits_B_V, self.params, self.generator)
        return next_B, lp_B, raw_B_V.gather(-1, next_B[:, None]).squeeze(-1), token_entropy_B(raw_B_V)

    def step(self, step: int) -> None:
        """Generate the token of every live row at ``step`` and record which rows it stops."""
        logits_B_V = self.logits(step)
        if self.code_V is None:
            self.code_V = reason_codes(logits_B_V.shape[-1], self.eos, self.params.stop_token_ids, self.spec.device)
            self.can_end_V = stop_enders(self.tok, self.stops, logits_B_V.shape[-1], self.spec.device) if self.stops else None
        next_B, lp_B, raw_B, ent_B = self.choose(logits_B_V, step)
        live_B = ~self.done_B
        next_B = torch.where(self.done_B, self.pad, next_B)
        self.gen_B_N[:, step], self.lp_B_N[:, step], self.raw_B_N[:, step] = next_B, lp_B, raw_B
        self.ent_B_N[:, step] = ent_B
        code_B = self.code_V[next_B]
        hit_B = (code_B > 0) & live_B
        self.reason_B = torch.where(hit_B, code_B, self.reason_B)
        self.done_B = self.done_B | hit_B
        if self.can_end_V is not None:
            self.match_stop_strings(step, self.can_end_V[next_B] & ~self.done_B)
        self.end_B = torch.where(self.done_B & live_B, step + 1, self.end_B)

    def match_stop_strings(self, step: int, candidates_B: torch.Tensor) -> None:
        """Stop the rows among ``candidates_B`` (their new token can complete a stop string, e.g. it
        holds its last character) whose last tokens now hold one: only those rows are decoded."""
        for b in torch.nonzero(candidates_B).flatten().tolist():
            tail = self.tok.decode(
                self.gen_B_N[b, max(0, step + 1 - self.window) : step + 1].tolist(),
                skip_special_tokens=True, clean_up_tokenization_spaces=False,
            )
            if any(s in tail for s in self.stops):
                self.reason_B[b], self.done_B[b] = 3, True

    def result(self, steps: int) -> tuple[list[list[int]], list[list[float]], list[list[float]], list[StopReason], list[list[float]]]:
        """Each row's tokens, logprobs, raw logprobs, why it stopped, and the entropy at each token (up to its stopping token)."""
        ends = self.end_B.tolist()
        cut = lambda x_B_N: [g[:e] for g, e in zip(x_B_N[:, :steps].tolist(), ends, strict=True)]  # noqa: E731
        final: list[StopReason] = [REASON_CODES[c] or "length" for c in self.reason_B.tolist()]
        return cut(self.gen_B_N), cut(self.lp_B_N), cut(self.raw_B_N), final, cut(self.ent_B_N)

    def cached_rows(self, ids_rows: list[list[int]], tokens: list[list[int]], steps: int) -> list[CachedPrefix | None]:
        """Each row's :class:`CachedPrefix` after :meth:`result`: its prompt and generated tokens but
        the last (never fed), with their keys and values; all None when the cache cannot be reused."""
        cache = next(iter(self.cache_kw.values()), None)
        fed = self.P + self.S + steps - 1  # columns whose KV the cache holds
        if cache is None or not reusable(cache) or cache.get_seq_length() != fed:
            return [None] * self.B
        keep_B_T = self.mask_B_T[:, :fed] > 0
        gen_cols = torch.arange(steps - 1, device=keep_B_T.device)
        keep_B_T[:, self.P + self.S :] &= gen_cols[None, :] < (self.end_B[:, None] - 1)
        kv_rows = extract_rows(cache, keep_B_T)
        return [
            CachedPrefix((*ids, *toks[:-1]), kv)
            for ids, toks, kv in zip(ids_rows, tokens, kv_rows, strict=True)
        ]


@dataclass
class Sampler:
    """``sample`` bound to a policy (and optionally one adapter), for code that passes it around."""

    policy: PolicyModel
    adapter: str | None = None
    defaults: SamplingParams = field(default_factory=SamplingParams)

    def sample(
        self, prompts: Sequence[Prompt] | Prompt, params: SamplingParams | None = None, *, chat: bool | None = None
    ) -> list[list[SampledSequence]]:
        return sample(self.policy, prompts, params or self.defaults, adapter=self.adapter, chat=chat)
