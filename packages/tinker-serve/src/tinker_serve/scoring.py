"""Scoring prompts: ``echo`` and ``max_tokens: 0`` on ``POST /v1/completions``.

Evaluation harnesses score a text by sending it as a prompt with ``echo: true, logprobs: N`` and
reading back each prompt token's logprob (lm-evaluation-harness's ``local-completions`` does this
for every loglikelihood and multiple-choice task, with ``max_tokens: 1``; ``max_tokens: 0``
scores without generating). The answer is OpenAI's completions shape: a choice's ``text`` is the
prompt's text followed by the completion, and its ``logprobs`` lists the prompt tokens first:
``tokens`` (each token's text; a beginning-of-sequence token the tokenizer put first, such as
``<bos>``, is there with the empty text, so the text is the prompt as sent and every entry stays
aligned with the prompt's token ids), ``token_logprobs`` (``None`` for the first prompt token, which
has no context), ``top_logprobs`` (the ``logprobs`` most likely tokens at each position, ``None``
for the first) and ``text_offset`` (where each token starts in ``text``), then the generated
tokens as without ``echo``.

A prompt token's logprob is ``log_softmax(logits[t - 1])[token[t]]`` of one forward pass over the
whole prompt, on the requested model (its adapter, or the base with every adapter off), in
float32, the same number :func:`tinker_algos.model.models.sequence_logprobs` gives. A token's
``token_logprobs`` entry and its ``top_logprobs`` values come from the same tensor, so a token
that is the most likely one has exactly the top value (how harnesses tell a greedy
continuation). The pass holds the engine's lock (it shares the weights with the decode loop);
one request scores at most :data:`MAX_SCORED_PROMPTS` prompts, each within the model's context.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from tinker_serve.protocol import CompletionRequest, bad_request, usage
from tinker_serve.served import ServedModels

MAX_SCORED_PROMPTS = 64
"""The most prompts one ``echo`` request may score (each is one forward pass)."""


@dataclass
class PromptScores:
    """One prompt's tokens as text, their logprobs (the first None) and top alternatives."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]

    @property
    def text(self) -> str:
        return "".join(self.tokens)

    def offsets(self) -> list[int]:
        out, at = [], 0
        for t in self.tokens:
            out.append(at)
            at += len(t)
        return out


def check_scoring_request(body: CompletionRequest, prompts: int) -> None:
    """Refuse what scoring does not do: streaming an ``echo`` or a ``max_tokens: 0`` request, and
    more than :data:`MAX_SCORED_PROMPTS` prompts to echo (400s naming the field)."""
    if body.stream and (body.echo or body.max_tokens == 0):
        field = "echo" if body.echo else "max_tokens"
        raise bad_request(f"'{field}' scores the prompt and answers at once: send it with stream: false", field)
    if body.echo and prompts > MAX_SCORED_PROMPTS:
        raise bad_request(f"'echo' scores at most {MAX_SCORED_PROMPTS} prompts per request, got {prompts}; "
                          "split them over several requests", "prompt")


def score_prompts(served: ServedModels, adapter: str | None, prompts: list[list[int]], top: int) -> list[PromptScores]:
    """Each prompt's :class:`PromptScores` on ``adapter`` (None: the base model) with ``top``
    alternatives per position (blocking: call it off the event loop)."""
    return [_score(served, adapter, ids, top) for ids in prompts]


def _score(served: ServedModels, adapter: str | None, ids: list[int], top: int) -> PromptScores:
    import torch

    policy = served.policy
    tokenizer = policy.tokenizer

    def piece(tok: int) -> str:
        return str(tokenizer.decode([tok], skip_special_tokens=False, clean_up_tokenization_spaces=False))

    with served.engine.lock, torch.inference_mode():
        module = policy.module
        module.eval()
        ctx: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if policy.is_peft:
            ctx = policy.adapters_disabled() if adapter is None else policy.using_adapter(adapter)
        tokens_1_T = torch.tensor([ids], dtype=torch.long, device=policy.spec.device)
        with ctx, policy.spec.autocast():
            out = module(input_ids=tokens_1_T, attention_mask=torch.ones_like(tokens_1_T),
                         position_ids=torch.arange(len(ids), device=tokens_1_T.device)[None], use_cache=False)
        logprobs_T_V = torch.log_softmax(out.logits[0, :-1].float(), dim=-1)
        del out
        chosen_T = logprobs_T_V.gather(-1, tokens_1_T[0, 1:, None]).squeeze(-1).tolist()
        best = logprobs_T_V.topk(min(top, logprobs_T_V.shape[-1]), dim=-1) if top else None
    tops: list[dict[str, float] | None] = [None]
    for t in range(len(ids) - 1):
        alternatives: dict[str, float] = {}
        if best is not None:
            for tok, value in zip(best.indices[t].tolist(), best.values[t].tolist(), strict=True):
                alternatives.setdefault(piece(int(tok)), float(value))
        tops.append(alternatives)
    bos = getattr(tokenizer, "bos_token_id", None)
    shown = ["" if t == 0 and tok == bos else piece(tok) for t, tok in enumerate(ids)]  # no "<bos>" text
    return PromptScores(shown, [None, *(float(v) for v in chosen_T)], tops)


def unscored_completion(model: str, prompts: list[list[int]], n: int, logprobs: bool) -> dict[str, Any]:
    """The answer to ``max_tokens: 0``: an empty completion per sample (``finish_reason:
    "length"``); :func:`with_echo` adds the prompts."""
    import time
    import uuid

    empty = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    choices = [{"index": k, "text": "", "finish_reason": "length", "logprobs": dict(empty) if logprobs else None}
               for k in range(len(prompts) * n)]
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage(sum(len(p) for p in prompts), 0)}


def with_echo(response: dict[str, Any], scores: list[PromptScores], n: int) -> dict[str, Any]:
    """``response`` (a completions answer, ``n`` choices per prompt) with each choice's prompt
    put in front of its text and logprobs (see the module docstring)."""
    for choice in response["choices"]:
        prompt = scores[choice["index"] // n]
        choice["text"] = prompt.text + choice["text"]
        generated = choice["logprobs"]
        if generated is None:
            continue
        shift = len(prompt.text)
        choice["logprobs"] = {
            "tokens": prompt.tokens + generated["tokens"],
            "token_logprobs": prompt.token_logprobs + generated["token_logprobs"],
            "top_logprobs": prompt.top_logprobs + generated["top_logprobs"],
            "text_offset": prompt.offsets() + [o + shift for o in generated["text_offset"]],
        }
    return response
