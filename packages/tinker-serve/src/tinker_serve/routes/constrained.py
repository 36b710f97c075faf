"""Constrained decoding: ``response_format`` and forced tool calls as a grammar's mask on each row.

A request's constraint becomes one grammar (llguidance's Lark dialect, its ``%json`` rule
compiling a JSON Schema), compiled once per request by :func:`compile_grammar` against the served
tokenizer and checked within :data:`LIMITS`; each row (sample) of the request gets a copy of the
matcher as a :class:`GrammarProcessor`, the engine's logits processor
(:mod:`tinker_algos.sampling.token_draw`): every step it lets through only the tokens the
grammar allows next, and once the grammar is complete only the end-of-turn tokens, so the answer
ends where the JSON (or the last tool call) ends.

* ``response_format``: ``{"type": "text"}`` (no constraint), ``{"type": "json_object"}`` (any JSON
  object), ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}`` (JSON valid
  against the schema; ``strict`` is accepted: the schema is always enforced).
* ``tool_choice: "required"``: one or more ``<tool_call>`` blocks in the default format
  (:func:`tinker_core.tools.format_tool_call`), each a call of one of the request's tools with
  arguments valid against its ``parameters``; a named function: one call of that tool.
* ``tool_choice: "auto"`` with tools *and* a ``response_format`` JSON: either tool calls or the JSON.

Tenant input is bounded before any compiling: a schema of more than :data:`MAX_SCHEMA_CHARS`
characters of JSON or deeper than :data:`MAX_SCHEMA_DEPTH` levels (the callable tools' calls
together count as one schema) is a 400 naming its field, and
so is a schema llguidance does not implement (its message names the keyword, e.g. ``if``) or
one whose grammar passes the parser limits. Whitespace between JSON tokens is not free (compact
JSON): a model cannot pad an answer with blanks until ``max_tokens``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tinker_core.tools import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from tinker_serve.protocol import bad_request

if TYPE_CHECKING:
    import llguidance
    import torch

    from tinker_algos.sampling.token_draw import LogitsProcessorFactory
    from tinker_serve.engine import Engine

MAX_SCHEMA_CHARS = 32 * 1024
"""The most characters (as JSON) a ``response_format`` schema or the tools' parameters may have."""
MAX_SCHEMA_DEPTH = 24
"""The deepest nesting of objects and arrays a schema may have (a ``properties`` map counts)."""
_JSON_OPTIONS = {"whitespace_flexible": False}


def limits() -> llguidance.LLParserLimits:
    """llguidance's parser limits for tenant grammars (smaller grammars than its defaults allow)."""
    import llguidance

    return llguidance.LLParserLimits(max_grammar_size=100_000, max_lexer_states=50_000, initial_lexer_fuel=500_000)


def _depth(value: Any) -> int:
    """The nesting depth of a JSON value (iterative: a deep value cannot exhaust the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_SCHEMA_DEPTH:
            return d
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        stack.extend((c, d + 1) for c in children if isinstance(c, dict | list))
    return deepest


def checked_schema(schema: Any, param: str) -> dict[str, Any]:
    """``schema`` if it is a bounded JSON Schema object (a 400 naming ``param`` otherwise), with
    llguidance's options of this server (compact whitespace) in place of any it carried."""
    if not isinstance(schema, dict):
        raise bad_request(f"'{param}' must be a JSON Schema object, got {type(schema).__name__}", param)
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_CHARS:
        raise bad_request(f"'{param}' is {size} characters of JSON; at most {MAX_SCHEMA_CHARS} are accepted", param)
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        raise bad_request(f"'{param}' nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it", param)
    return {**schema, "x-guidance": _JSON_OPTIONS}


def response_format_schema(response_format: Any) -> dict[str, Any] | None:
    """The JSON Schema a ``response_format`` asks for (None: plain text); 400s name the field."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return checked_schema({"type": "object"}, "response_format")
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise bad_request("'response_format.json_schema' must be {\"name\": ..., \"schema\": {...}}",
                              "response_format.json_schema.schema")
        return checked_schema(spec["schema"], "response_format.json_schema.schema")
    raise bad_request(f"'response_format.type' must be 'text', 'json_object' or 'json_schema', got {kind!r}",
                      "response_format.type")


def _call_schema(tool: dict[str, Any], param: str) -> dict[str, Any]:
    fn = tool["function"]
    params = checked_schema(fn.get("parameters") or {"type": "object"}, param)
    params.pop("x-guidance")
    return {"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": params},
            "required": ["name", "arguments"], "additionalProperties": False}


def _lark_string(text: str) -> str:
    return json.dumps(text)


def chat_grammar(
    schema: dict[str, Any] | None, tools: Sequence[dict[str, Any]], forced: Sequence[dict[str, Any]] | None, *, several: bool = True,
) -> str | None:
    """The Lark grammar of a chat answer (None: unconstrained). ``forced``: the tools one of which
    must be called (``tool_choice`` ``"required"`` or a named one); else with ``tools`` and a
    ``schema`` the answer is either calls of ``tools`` or the JSON."""
    callable_tools = forced if forced is not None else (tools if schema is not None else ())
    rules: list[str] = []
    alternatives: list[str] = []
    if callable_tools:
        calls = [_call_schema(t, "tools") for t in callable_tools]
        body = checked_schema(calls[0] if len(calls) == 1 else {"anyOf": calls}, "tools")  # all tools together: bounded
        body.pop("x-guidance")
        rules.append(f"call: {_lark_string(TOOL_CALL_OPEN + chr(10))} call_body {_lark_string(chr(10) + TOOL_CALL_CLOSE)}")
        rules.append(f"call_body: %json {json.dumps({**body, 'x-guidance': _JSON_OPTIONS})}")
        alternatives.append('call ("\\n" call)*' if several else "call")
    if schema is not None and forced is None:
        rules.append(f"answer: %json {json.dumps(schema)}")
        alternatives.append("answer")
    if not alternatives:
        return None
    return "\n".join([f"start: {' | '.join(alternatives)}", *rules]) + "\n"


@functools.lru_cache(maxsize=8)
def _ll_tokenizer(tokenizer: Any, vocab: int, eos: tuple[int, ...]) -> llguidance.LLTokenizer:
    """llguidance's view of ``tokenizer`` (about a second for a 50k vocabulary: cached): from the
    fast tokenizer's JSON when llguidance reads its decoder, else from each token's decoded text
    (a character-level tokenizer such as the ``tiny`` preset's)."""
    import llguidance
    import llguidance.hf

    try:
        return llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab, eos_token=list(eos))
    except ValueError:
        pass
    special = set(getattr(tokenizer, "all_special_ids", ()))

    class _Pieces:
        eos_token_id = eos[0]
        bos_token_id = getattr(tokenizer, "bos_token_id", None)
        special_token_ids = sorted(special)
        tokens = [tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False).encode("utf-8")
                  for i in range(vocab)]

        def __call__(self, text: str) -> list[int]:
            return list(tokenizer.encode(text, add_special_tokens=False))

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Pieces()), n_vocab=vocab, eos_token=list(eos))


def compile_grammar(engine: Engine, grammar: str, param: str) -> LogitsProcessorFactory:
    """A factory of :class:`GrammarProcessor` s for ``grammar`` on ``engine``'s model (blocking:
    call it off the event loop); a grammar llguidance refuses is a 400 naming ``param``."""
    import llguidance

    vocab = int(engine.policy.base_model.config.vocab_size)
    eos = tuple(sorted(engine.eos))
    ll_tok = _ll_tokenizer(engine.policy.tokenizer, vocab, eos)
    error = llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(grammar), ll_tok, limits=limits())
    if error:
        first = error.strip().splitlines()[0]
        raise bad_request(f"'{param}' cannot be enforced by this server: {first}", param)
    proto = llguidance.LLMatcher(ll_tok, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0, limits=limits())
    if proto.is_error():
        raise bad_request(f"'{param}' cannot be enforced by this server: {proto.get_error()}", param)
    return functools.partial(GrammarProcessor, proto, eos, vocab)


class GrammarProcessor:
    """One row's grammar: a copy of the request's matcher, advanced by the row's tokens, masking
    the logits to what it allows next. It never raises and never masks every token: when the
    grammar is complete, or the matcher fails (it then allows nothing), only end-of-turn tokens
    remain, so the row ends."""

    def __init__(self, proto: llguidance.LLMatcher, eos: tuple[int, ...], vocab: int) -> None:
        self.matcher = proto.deep_copy()
        self.eos, self.vocab, self.seen = list(eos), vocab, 0

    def __call__(self, generated: Sequence[int], logits_V: torch.Tensor) -> torch.Tensor:
        import numpy as np
        import torch

        m = self.matcher
        for tok in generated[self.seen :]:
            if m.is_error() or m.is_stopped():
                break
            m.consume_token(int(tok))
        self.seen = len(generated)
        allowed_V = torch.zeros(logits_V.shape[-1], dtype=torch.bool)
        if not (m.is_error() or m.is_stopped()):
            bits = np.unpackbits(np.frombuffer(m.compute_bitmask(), dtype=np.uint8), bitorder="little")[: logits_V.shape[-1]]
            allowed_V[: len(bits)] = torch.from_numpy(bits.astype(bool))
        if not bool(allowed_V.any()):
            allowed_V[[t for t in self.eos if t < logits_V.shape[-1]]] = True
        return logits_V.masked_fill(~allowed_V.to(logits_V.device), float("-inf"))


__all__ = ["MAX_SCHEMA_CHARS", "MAX_SCHEMA_DEPTH", "GrammarProcessor", "chat_grammar", "checked_schema", "compile_grammar",
           "response_format_schema"]
