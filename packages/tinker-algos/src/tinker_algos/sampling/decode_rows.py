"""Helpers of the sampler's decode loop: how a batch's prompts relate, and which tokens stop a row.

* :func:`shared_prefix_len` -- the prefix every prompt shares (run once, its cache repeated);
* :func:`left_padded` -- the batch laid out as ``[shared prefix][pads][own prompt][generated]``;
* :func:`distinct_rows` -- rows with the same prompt (a GRPO group's copies), prefilled once;
* :func:`reason_codes` -- per vocabulary id, the stop it causes (one lookup per step, no ``isin``);
* :func:`stop_enders` -- per vocabulary id, whether it can complete a stop string, so that the
  loop decodes text only for rows where a stop string can appear (cached per tokenizer).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["distinct_rows", "left_padded", "reason_codes", "shared_prefix_len", "stop_enders"]


def shared_prefix_len(ids_rows: list[list[int]]) -> int:
    """Length of the prefix every row shares, leaving each row at least one token of its own."""
    first, n = ids_rows[0], min(len(r) for r in ids_rows) - 1
    for r in ids_rows[1:]:
        n = next((i for i in range(n) if r[i] != first[i]), n)
    return n


def distinct_rows(ids_rows: list[list[int]]) -> tuple[list[int], list[int]]:
    """``(first_of, row_of)``: the first row of each distinct prompt, and for every row the index
    of its prompt in ``first_of``."""
    seen: dict[tuple[int, ...], int] = {}
    first_of: list[int] = []
    row_of: list[int] = []
    for b, r in enumerate(ids_rows):
        key = tuple(r)
        u = seen.get(key)
        if u is None:
            u = seen[key] = len(first_of)
            first_of.append(b)
        row_of.append(u)
    return first_of, row_of


def reason_codes(V: int, eos: set[int], stop_token_ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """Per vocabulary id, the code (index into :data:`tinker_algos.sampling.sampler.REASON_CODES`) of the stop it causes, 0 for none;
    a ``stop_token_ids`` id is reason ``"stop_id"`` even when it is also an end-of-turn id."""
    code_V = torch.zeros(V, dtype=torch.long)
    eos_ids = [t for t in eos if 0 <= t < V]
    stop_ids = [int(t) for t in stop_token_ids if 0 <= int(t) < V]
    code_V[eos_ids] = 1
    code_V[stop_ids] = 2
    return code_V.to(device)


_STOP_ENDERS: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, dict[tuple[tuple[str, ...], int], torch.Tensor]] = weakref.WeakKeyDictionary()


def stop_enders(tok: PreTrainedTokenizerBase, stops: tuple[str, ...], V: int, device: torch.device) -> torch.Tensor:
    """Per vocabulary id: can a text grow to hold one of ``stops`` by this token? True when the
    token's text holds the last character of a stop string, or is not plain text on its own (a
    partial UTF-8 sequence, an id the tokenizer does not know). A stop string ending in a space
    (which tokenizers often fold into the next token) makes every id a candidate."""
    try:
        per_tok = _STOP_ENDERS.setdefault(tok, {})
    except TypeError:  # not weak-referenceable: no cache
        per_tok = {}
    key = (stops, V)
    if key not in per_tok:
        if any(s[-1] == " " for s in stops):
            mask = torch.ones(V, dtype=torch.bool)
        else:
            known = min(V, len(tok))
            texts = tok.batch_decode([[i] for i in range(known)], skip_special_tokens=True, clean_up_tokenization_spaces=False)
            lasts = {s[-1] for s in stops}
            mask = torch.ones(V, dtype=torch.bool)
            mask[:known] = torch.tensor([("\ufffd" in t) or any(c in t for c in lasts) for t in texts], dtype=torch.bool)
        per_tok[key] = mask
    return per_tok[key].to(device)


def left_padded(
    ids_rows: list[list[int]], P: int, S: int, N: int, pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens_B_T, mask_B_T)`` on ``device``: each row as ``[shared prefix P][pads][own prompt][N to generate]``."""
    B, T = len(ids_rows), P + S + N
    tokens_np = np.full((B, T), pad, dtype=np.int64)  # filled on the host, then one copy each
    mask_np = np.ones((B, T), dtype=np.int64)
    for b, r in enumerate(ids_rows):
        own = len(r) - P
        tokens_np[b, :P] = r[:P]
        tokens_np[b, P + S - own : P + S] = r[P:]
        mask_np[b, P : P + S - own] = 0  # pads between the shared prefix and the row's own tokens
    return torch.from_numpy(tokens_np).to(device), torch.from_numpy(mask_np).to(device)
