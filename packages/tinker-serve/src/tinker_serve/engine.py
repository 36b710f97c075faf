"""Continuous batching: concurrent generation requests share one decode loop on one base model.

The :class:`Engine` keeps one batch of rows (a row is one sample of one request) and one KV
cache. Between two decode steps it drops rows that finished or whose client went away, and lets
waiting requests join: their prompts are prefilled together (left-padded, one row per request,
the last position's logits only), each prompt's cache is repeated for its ``n`` samples (the
shared-prefix idea of :mod:`tinker_algos.sampling.sampler`), and the new rows are merged into the running
cache by left-padding the shorter of the two along the sequence (pads are masked out). Positions
count real tokens only (:func:`tinker_algos.model.models.position_ids_from_mask`), so a row sees the
same positions whatever batch it sits in. Columns no row still attends to are trimmed off.

Adapters: every row names an adapter of the policy (None: the base model). A batch of one
adapter runs with it active; a mixed batch passes peft's ``adapter_names`` (``"__base__"`` for
the base), so requests for different adapters share every decode step.

Tokens are chosen with :func:`tinker_algos.sampling.sampler.choose_tokens` per request (its temperature,
top-p, top-k and seeded generator), after its penalties and logits processors (a JSON schema's
mask: :mod:`tinker_algos.sampling.token_draw`, one processor per row); the logprobs reported are the model's own (``log_softmax`` of
the logits, as OpenAI's API reports them). Text is streamed as it becomes final: the tail that
could still become a stop string, or an incomplete UTF-8 character, is held back. A request
finishes ``"stop"`` (an end-of-turn token, or a stop string, which is cut from the text),
``"length"`` (``max_new_tokens``, or the model's context), ``"abort"`` (cancelled) or
``"error"`` (the step failed; the message names why, the traceback goes to the log).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from tinker_algos.model.models import (
    PolicyModel,
    accepts_kwarg,
    cache_kwarg,
    position_ids_from_mask,
)
from tinker_algos.model.prompts import eos_token_ids
from tinker_algos.sampling.sampler import SamplingParams, choose_tokens
from tinker_algos.sampling.token_draw import LogitsProcessor, adjust_logits, adjusts

logger = logging.getLogger(__name__)

BASE = "__base__"  # peft's name for "no adapter" in a mixed batch


@dataclass
class TokenInfo:
    """One generated token: its id, text, logprob, and the most likely alternatives;
    ``sampled_logprob`` is its logprob under the distribution it was drawn from (temperature,
    top-p, top-k applied: the behaviour policy the rollout proxy records)."""

    id: int
    text: str
    logprob: float
    top: list[tuple[str, float]] = field(default_factory=list)
    sampled_logprob: float | None = None


@dataclass
class Event:
    """What one sample of a request produced in one step: new text and tokens; ``finish_reason``
    is set on the sample's last event (with ``completion_tokens``, and ``error`` for ``"error"``)."""

    sample: int
    text: str
    tokens: list[TokenInfo]
    finish_reason: str | None = None
    completion_tokens: int = 0
    error: str | None = None


@dataclass(eq=False)
class Request:
    """A generation request: prompt ids, sampling settings, adapter (None: base), and the
    callback that receives its :class:`Event` s (called from the engine's thread)."""

    prompt_ids: list[int]
    params: SamplingParams
    on_event: Callable[[Event], None]
    adapter: str | None = None
    top_logprobs: int = 0
    logprobs: bool = False  # fill TokenInfo.text (and top); otherwise only ids and logprobs
    cancelled: bool = False
    generator: torch.Generator | None = None


@dataclass(eq=False)
class _Row:
    req: Request
    sample: int
    tokens: list[int] = field(default_factory=list)
    sent: int = 0  # characters of text already sent
    done: bool = False
    processors: list[LogitsProcessor] = field(default_factory=list)  # this row's (a grammar's mask)


class Engine:
    """The decode loop (see the module docstring). ``max_batch`` rows decode together; more
    requests wait. :meth:`start` runs it in a thread; :meth:`step` runs one iteration (tests).

    ``lock`` is held during every step: hold it to change the policy's adapters.
    """

    def __init__(self, policy: PolicyModel, *, max_batch: int = 32, extra_eos_ids: Iterable[int] = ()) -> None:
        self.policy = policy
        self.max_batch = max_batch
        self.lock = threading.RLock()
        self.eos = eos_token_ids(policy.tokenizer, policy.base_model, extra_eos_ids)
        self.max_positions = getattr(policy.base_model.config, "max_position_embeddings", None)
        self._waiting: collections.deque[Request] = collections.deque()
        self._wake = threading.Condition()
        self._rows: list[_Row] = []
        self._cache: Any = None  # a transformers DynamicCache over the rows
        self._mask = torch.zeros((0, 0), dtype=torch.long)
        self._pos = torch.zeros(0, dtype=torch.long)
        self._logits: torch.Tensor | None = None
        self._retiring: set[str] = set()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.decode_steps = 0
        self.largest_batch = 0  # the most rows one decode step has carried

    # ---- public ---------------------------------------------------------------------------
    def submit(self, req: Request) -> Request:
        """Queue ``req`` (its params are validated here: ValueError)."""
        req.params.validate()
        if req.params.n > self.max_batch:
            raise ValueError(f"n={req.params.n} is more than this server's batch of {self.max_batch} rows")
        if req.params.seed is not None:
            req.generator = torch.Generator(device=self.policy.spec.device)
            req.generator.manual_seed(int(req.params.seed))
        with self._wake:
            self._waiting.append(req)
            self._wake.notify()
        return req

    def cancel(self, req: Request) -> None:
        """Stop ``req``: its rows leave the batch before the next decode step."""
        req.cancelled = True
        with self._wake:
            self._wake.notify()

    @property
    def active_rows(self) -> int:
        return len(self._rows)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def in_use(self, adapter: str) -> bool:
        with self._wake:
            waiting = any(q.adapter == adapter for q in self._waiting)
        return waiting or any(r.req.adapter == adapter for r in self._rows)

    def retire_adapter(self, name: str) -> None:
        """Remove adapter ``name`` from the policy once no row or waiting request uses it."""
        with self.lock:
            self._retiring.add(name)
            self._retire()

    def start(self) -> None:
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="tinker-serve-engine", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and not self._rows and not self._waiting:
                    self._wake.wait()
                if self._stopping:
                    return
            self.step()

    # ---- one iteration ----------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> None:
        """Drop cancelled rows, admit waiting requests, pick a token for every row, emit events,
        drop finished rows, and run one decode step for the rest."""
        with self.lock:
            admitted: list[Request] = []  # filled by _admit before its prefill
            try:
                self._drop([i for i, r in enumerate(self._rows) if r.req.cancelled])
                self._admit(admitted)
                if not self._rows:
                    return
                finished, next_ids = self._choose()
                self._drop(finished)
                if self._rows:
                    gone = set(finished)
                    self._decode([t for i, t in enumerate(next_ids) if i not in gone])
            except Exception as e:  # the batch is lost: every request in it ends with the reason
                logger.exception("tinker-serve: a decode step failed")
                reason = str(e) if isinstance(e, ValueError | RuntimeError) else type(e).__name__
                reqs = {id(r.req): r.req for r in self._rows}
                reqs.update({id(q): q for q in admitted})
                for req in reqs.values():
                    for s in range(req.params.n):
                        with contextlib.suppress(Exception):  # a listener that is gone changes nothing
                            req.on_event(Event(s, "", [], "error", error=f"generation failed: {reason}"))
                self._reset()
            finally:
                self._retire()

    def _reset(self) -> None:
        self._rows, self._cache, self._logits = [], None, None
        self._mask = torch.zeros((0, 0), dtype=torch.long)
        self._pos = torch.zeros(0, dtype=torch.long)

    def _retire(self) -> None:
        for name in sorted(self._retiring):
            if not self.in_use(name):
                self._retiring.discard(name)
                if name in self.policy.adapter_names:
                    self.policy.remove_adapter(name)

    def _drop(self, indices: list[int]) -> None:
        if not indices:
            return
        gone = set(indices)
        keep = [i for i in range(len(self._rows)) if i not in gone]
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self._reset()
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.policy.spec.device)
        self._mask, self._pos = self._mask[idx], self._pos[idx]
        self._logits = self._logits[idx] if self._logits is not None else None
        first = int(self._mask.any(0).long().argmax())  # columns before it are pads in every row
        for layer in self._cache.layers:
            layer.keys, layer.values = layer.keys[idx, :, first:], layer.values[idx, :, first:]
        self._mask = self._mask[:, first:]

    def _admit(self, new: list[Request]) -> None:
        """Move waiting requests that fit into the batch (appended to ``new`` first)."""
        from transformers import DynamicCache

        free = self.max_batch - len(self._rows)
        with self._wake:
            while self._waiting and (self._waiting[0].cancelled or self._waiting[0].params.n <= free):
                req = self._waiting.popleft()
                if req.cancelled:
                    continue
                new.append(req)
                free -= req.params.n
        if not new:
            return
        device = self.policy.spec.device
        S = max(len(r.prompt_ids) for r in new)
        ids = torch.full((len(new), S), self.policy.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(new), S), dtype=torch.long)
        for b, r in enumerate(new):
            ids[b, S - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids, dtype=torch.long)
            mask[b, S - len(r.prompt_ids) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        cache = DynamicCache()
        logits = self._forward(ids, mask, position_ids_from_mask(mask), cache, [r.adapter for r in new])
        counts = torch.tensor([r.params.n for r in new], device=device)
        kv = [(layer.keys.repeat_interleave(counts, 0), layer.values.repeat_interleave(counts, 0)) for layer in cache.layers]
        logits, mask = logits.repeat_interleave(counts, 0), mask.repeat_interleave(counts, 0)
        pos = mask.sum(-1)
        if self._rows:  # merge: left-pad the shorter cache so both have M columns
            L, M = self._mask.shape[1], max(self._mask.shape[1], S)

            def pad(t: torch.Tensor, width: int) -> torch.Tensor:
                return torch.nn.functional.pad(t, (0, 0, M - width, 0)) if t.dim() == 4 else torch.nn.functional.pad(t, (M - width, 0))

            old = [(layer.keys, layer.values) for layer in self._cache.layers]
            kv = [(torch.cat([pad(k0, L), pad(k1, S)]), torch.cat([pad(v0, L), pad(v1, S)])) for (k0, v0), (k1, v1) in zip(old, kv, strict=True)]
            mask = torch.cat([pad(self._mask, L), pad(mask, S)])
            pos = torch.cat([self._pos, pos])
            assert self._logits is not None
            logits = torch.cat([self._logits, logits])
        self._cache, self._mask, self._pos, self._logits = DynamicCache(ddp_cache_data=kv), mask, pos, logits
        self._rows.extend(_Row(r, s, processors=[f() for f in r.params.logits_processors]) for r in new for s in range(r.params.n))

    def _forward(
        self, ids_B_T: torch.Tensor, mask_B_L: torch.Tensor, pos_B_T: torch.Tensor, cache: Any, adapters: list[str | None]
    ) -> torch.Tensor:
        """Logits at the last column after feeding ``ids_B_T``; ``cache`` grows by its columns."""
        policy = self.policy
        module = policy.module
        module.eval()
        kwargs: dict[str, Any] = {cache_kwarg(module): cache}
        if accepts_kwarg(module, "logits_to_keep"):
            kwargs["logits_to_keep"] = 1
        names = set(adapters)
        ctx: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if policy.is_peft:
            if names == {None}:
                ctx = policy.adapters_disabled()
            elif len(names) == 1:
                ctx = policy.using_adapter(adapters[0])
            else:
                kwargs["adapter_names"] = [a or BASE for a in adapters]
        with ctx, policy.spec.autocast():
            out = module(input_ids=ids_B_T, attention_mask=mask_B_L, position_ids=pos_B_T, use_cache=True, **kwargs)
        return out.logits[:, -1].float()

    def _decode(self, next_ids: list[int]) -> None:
        device = self.policy.spec.device
        B = len(self._rows)
        ids = torch.tensor(next_ids, dtype=torch.long, device=device)[:, None]
        self._mask = torch.cat([self._mask, torch.ones((B, 1), dtype=torch.long, device=device)], dim=1)
        self._logits = self._forward(ids, self._mask, self._pos[:, None], self._cache, [r.req.adapter for r in self._rows])
        self._pos = self._pos + 1
        self.decode_steps += 1
        self.largest_batch = max(self.largest_batch, B)

    def _choose(self) -> tuple[list[int], list[int]]:
        """A token for every row; events sent. Returns (finished row indices, chosen ids)."""
        assert self._logits is not None
        device = self.policy.spec.device
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(self._rows):
            groups.setdefault(id(r.req), []).append(i)
        chosen = [0] * len(self._rows)
        finished: list[int] = []
        for idxs in groups.values():
            req = self._rows[idxs[0]].req
            logits = self._logits[torch.tensor(idxs, device=device)]
            drawn = logits
            if adjusts(req.params):  # penalties, a grammar: what is drawn from, not the logprobs reported
                rows = [self._rows[i] for i in idxs]
                drawn = adjust_logits(logits, [r.tokens for r in rows], frequency_penalty=req.params.frequency_penalty,
                                      presence_penalty=req.params.presence_penalty, processors_B=[r.processors for r in rows])
            next_b, sampled_b = choose_tokens(drawn, req.params, req.generator)
            raw = torch.log_softmax(logits, dim=-1)
            lp = raw.gather(-1, next_b[:, None]).squeeze(-1).tolist()
            sampled = sampled_b.tolist()
            tops = raw.topk(min(req.top_logprobs, raw.shape[-1]), dim=-1) if req.top_logprobs else None
            for j, i in enumerate(idxs):
                tok = int(next_b[j])
                chosen[i] = tok
                top = []
                if tops is not None:
                    top = [(self._piece(int(t)), float(v)) for t, v in zip(tops.indices[j].tolist(), tops.values[j].tolist(), strict=True)]
                piece = self._piece(tok) if req.logprobs else ""
                if self._advance(self._rows[i], TokenInfo(tok, piece, float(lp[j]), top, float(sampled[j]))):
                    finished.append(i)
        return finished, chosen

    def _piece(self, tok: int) -> str:
        return self.policy.tokenizer.decode([tok], skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _room(self, row: _Row) -> int:
        """Tokens the model's context leaves this row."""
        return (self.max_positions or 1 << 62) - len(row.req.prompt_ids)

    def _advance(self, row: _Row, info: TokenInfo) -> bool:
        """Add a token to ``row``, send what became final; True when the row is finished."""
        params = row.req.params
        row.tokens.append(info.id)
        eos = (params.stop_at_eos and info.id in self.eos) or info.id in params.stop_token_ids
        shown = row.tokens[:-1] if eos else row.tokens
        text = self.policy.tokenizer.decode(shown, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        reason = "stop" if eos else None
        cut = min((text.find(s) for s in params.stop if s in text), default=-1)
        if cut >= 0:
            text, reason = text[:cut], "stop"
        elif reason is None and len(row.tokens) >= min(params.max_new_tokens, self._room(row)):
            reason = "length"
        end = len(text)
        if reason is None:  # hold back what may still become a stop string or a longer character
            end -= max((len(s) for s in params.stop), default=1) - 1
            while end > row.sent and text[end - 1] == "\ufffd":
                end -= 1
        delta = text[row.sent : end] if end > row.sent else ""
        row.sent = max(row.sent, end)
        row.done = reason is not None
        row.req.on_event(Event(row.sample, delta, [info], reason, len(row.tokens) if reason else 0))
        return row.done
