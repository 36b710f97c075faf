"""Tinker's ``SampleRequest`` onto the model host's ``sample`` and ``score`` operations.

:func:`sample_args` reads the prompt and ``SamplingParams``; :class:`LogprobRequest` reads what
the request asks beyond the samples (``prompt_logprobs``, ``topk_prompt_logprobs``,
``topk_sample_logprobs``, ``prompt_logprobs_last_n``), which one ``score`` call over the prompt
and the sampled sequences answers (:func:`tinker_algos.tinker_ops.score_tokens`: logprobs at
temperature 1, the model's own distribution). :func:`answer` assembles the result that
:func:`.protowire.sample_response` writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinker_algos.tinker_ops import MASK_LOGPROB, RequestLimits
from tinker_scheduler.errors import StatusError
from tinker_scheduler.tinker_api import fields

#: The most top-k logprobs one request may ask per position (prompt or sampled).
MAX_TOPK = 20
#: The most stop sequences one request may give, and the longest stop string.
MAX_STOP = 16
MAX_STOP_CHARS = 256


def sample_args(body: Mapping[str, Any]) -> tuple[list[int], dict[str, Any], int]:
    """``(prompt tokens, sampling params for the host, num_samples)`` of a ``SampleRequest``."""
    prompt = prompt_tokens(fields.obj(body, "prompt"))
    p = fields.obj(body, "sampling_params")
    params: dict[str, Any] = {"max_tokens": fields.whole(p.get("max_tokens"), "sampling_params.max_tokens", 0),
                              "top_k": fields.whole(p.get("top_k"), "sampling_params.top_k", 0)}
    for name in ("temperature", "top_p"):
        if p.get(name) is not None:
            params[name] = fields.number(p[name], f"sampling_params.{name}")
    if p.get("seed") is not None:
        params["seed"] = fields.whole(p["seed"], "sampling_params.seed")
    if params["top_k"] == -1:
        params["top_k"] = 0
    stop = p.get("stop")
    if stop:
        stops = list(stop) if isinstance(stop, list) else [stop]
        if len(stops) > MAX_STOP:
            raise StatusError("INVALID_ARGUMENT", f"sampling_params.stop: {len(stops)} stop sequences, over the limit of {MAX_STOP}")
        ints = all(isinstance(x, int) and not isinstance(x, bool) for x in stops)
        if not ints and not all(isinstance(x, str) and 0 < len(x) <= MAX_STOP_CHARS for x in stops):
            raise StatusError("INVALID_ARGUMENT", "sampling_params.stop: must be strings of 1.."
                                                  f"{MAX_STOP_CHARS} characters or token ids")
        params["stop_token_ids" if ints else "stop"] = stops
    if params["max_tokens"] <= 0:
        raise StatusError("INVALID_ARGUMENT", "sampling_params.max_tokens: must be > 0")
    return prompt, params, num_samples(body)


def num_samples(body: Mapping[str, Any], limits: RequestLimits | None = None) -> int:
    """A ``SampleRequest``'s ``num_samples`` (1 when absent): a whole number >= 1, and (with
    ``limits``) at most ``max_data``."""
    n = body.get("num_samples")
    if n is None:
        return 1
    if isinstance(n, bool) or not isinstance(n, int):
        raise StatusError("INVALID_ARGUMENT", f"num_samples: must be a whole number (got {n!r:.40})")
    if n < 1:
        raise StatusError("INVALID_ARGUMENT", f"num_samples: must be >= 1 (got {n})")
    if limits is not None and n > limits.max_data:
        raise StatusError("INVALID_ARGUMENT", f"num_samples: {n} is over the limit of {limits.max_data} sequences "
                                              "per request (max_data_per_request); sample in several requests")
    return n


def prompt_tokens(model_input: Mapping[str, Any]) -> list[int]:
    tokens: list[int] = []
    chunks = model_input.get("chunks") or []
    if not isinstance(chunks, list):
        raise StatusError("INVALID_ARGUMENT", "prompt.chunks: must be a list")
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, Mapping):
            raise StatusError("INVALID_ARGUMENT", f"prompt.chunks[{i}]: must be a JSON object")
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise StatusError("INVALID_ARGUMENT", f"prompt.chunks: {chunk.get('type')!r:.40} chunks are not supported (text tokens only)")
        ids = chunk.get("tokens") or []
        if not isinstance(ids, list):
            raise StatusError("INVALID_ARGUMENT", f"prompt.chunks[{i}].tokens: must be a list of token ids")
        tokens.extend(fields.whole(t, f"prompt.chunks[{i}].tokens") for t in ids)
    if not tokens:
        raise StatusError("INVALID_ARGUMENT", "prompt: has no tokens")
    return tokens


def _topk(body: Mapping[str, Any], name: str) -> int:
    k = fields.whole(body.get(name), name, 0)
    if not 0 <= k <= MAX_TOPK:
        raise StatusError("INVALID_ARGUMENT", f"{name}: must be in 0..{MAX_TOPK} (got {k})")
    return k


@dataclass(frozen=True)
class LogprobRequest:
    """What a ``SampleRequest`` asks beyond the samples."""

    prompt: bool = False  # prompt_logprobs
    topk_prompt: int = 0
    topk_sample: int = 0
    last_n: int | None = None  # prompt_logprobs_last_n: score only the last n prompt tokens

    @classmethod
    def of(cls, body: Mapping[str, Any], prompt_len: int) -> LogprobRequest:
        for name in ("target_prompt_logprobs", "prompt_alt_tokens_k"):
            if body.get(name):
                raise StatusError("UNIMPLEMENTED", f"{name}: is not supported by this server (prompt_logprobs, "
                                                   "topk_prompt_logprobs and topk_sample_logprobs are)")
        last_n = body.get("prompt_logprobs_last_n")
        if last_n is not None:
            last_n = fields.whole(last_n, "prompt_logprobs_last_n")
        if last_n is not None and not 1 <= last_n <= prompt_len - 1:
            raise StatusError("INVALID_ARGUMENT",
                              f"prompt_logprobs_last_n: must be in 1..{prompt_len - 1} (len(prompt) - 1), got {last_n}")
        return cls(bool(body.get("prompt_logprobs")), _topk(body, "topk_prompt_logprobs"),
                   _topk(body, "topk_sample_logprobs"), None if last_n is None else int(last_n))

    @property
    def wanted(self) -> bool:
        return self.prompt or self.topk_prompt > 0 or self.topk_sample > 0

    def sequences(self, prompt: list[int], samples: Sequence[Mapping[str, Any]]) -> list[list[int]]:
        """What to score: the prompt (for prompt logprobs), then prompt + each sample (for their top-k)."""
        out = [prompt] if self.prompt or self.topk_prompt else []
        if self.topk_sample:
            out.extend(prompt + list(s["tokens"]) for s in samples)
        return out


def answer(request: LogprobRequest, prompt: list[int], samples: list[dict[str, Any]],
           scores: Sequence[Mapping[str, np.ndarray]]) -> dict[str, Any]:
    """The ``SampleResponse`` fields: ``sequences`` (each with ``topk`` ``(ids, logprobs)`` when
    asked), ``prompt_logprobs`` (NaN where not scored) and ``topk_prompt_logprobs``."""
    out: dict[str, Any] = {"sequences": samples, "prompt_logprobs": None, "topk_prompt_logprobs": None}
    rest = list(scores)
    if request.prompt or request.topk_prompt:
        scored = rest.pop(0)
        skip = len(prompt) - request.last_n if request.last_n else 0  # entries before the last n: None
        if request.prompt:
            lp = scored["logprobs"].copy()
            lp[:skip] = np.nan
            out["prompt_logprobs"] = lp
        if request.topk_prompt:
            out["topk_prompt_logprobs"] = _rows(scored, 0, len(prompt), request.topk_prompt, skip)
    if request.topk_sample:
        for s, scored in zip(samples, rest, strict=True):
            s["topk"] = _rows(scored, len(prompt), len(prompt) + len(s["tokens"]), request.topk_sample, 0)
    return out


def _rows(scored: Mapping[str, np.ndarray], lo: int, hi: int, k: int, skip: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``lo:hi`` of a score's top-k, ``k`` wide; the first ``skip`` rows empty (Tinker's filler)."""
    ids = scored["topk_ids"][lo:hi, :k].copy()
    lps = scored["topk_logprobs"][lo:hi, :k].copy()
    ids[:skip], lps[:skip] = 0, MASK_LOGPROB
    return ids, lps
