"""What constrained decoding costs (``response_format`` / forced tool calls in ``opentinker serve``):
llguidance's view of SmolLM2's tokenizer (built once per served model), one request's matcher,
and the per-token mask of :class:`tinker_serve.routes.constrained.GrammarProcessor` (median, min
and max over the tokens of a JSON answer, repeated; the first token of a request computes the
lexer's initial state and is reported apart).

Needs SmolLM2-135M-Instruct in the shared cache (``opentinker model fetch smollm2-135m-instruct``).

    uv run --no-sync python bench/bench_constrained.py [--quick]
"""

from __future__ import annotations

import statistics
import time

from _common import parse_args, print_table, wait_for_idle, write_results


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    import llguidance
    import llguidance.hf
    import torch
    from transformers import AutoTokenizer

    from tinker_algos.hub import fetch_preset
    from tinker_serve.routes.constrained import GrammarProcessor, chat_grammar, checked_schema

    tok = AutoTokenizer.from_pretrained(fetch_preset("smollm2-135m-instruct"))
    vocab, eos = 49152, (2,)
    busy = wait_for_idle(args)
    t0 = time.perf_counter()
    ll_tok = llguidance.hf.from_tokenizer(tok, n_vocab=vocab, eos_token=list(eos))
    tokenizer_s = time.perf_counter() - t0
    schema = checked_schema({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                              "age": {"type": "integer"}, "city": {"enum": ["Paris", "Oslo"]}},
                             "required": ["name", "age", "city"], "additionalProperties": False}, "schema")
    grammar = llguidance.LLMatcher.grammar_from_lark(chat_grammar(schema, (), None) or "")
    ids = tok.encode('{"name":"Ann Smith","age":31,"city":"Oslo"}', add_special_tokens=False)
    first, steps, matcher_s = [], [], []
    for _ in range(3 if args.quick else 20):
        t0 = time.perf_counter()
        proto = llguidance.LLMatcher(ll_tok, grammar)
        matcher_s.append(time.perf_counter() - t0)
        processor = GrammarProcessor(proto, eos, vocab)
        logits_V = torch.zeros(vocab)
        for i in range(len(ids) + 1):
            t0 = time.perf_counter()
            processor(ids[:i], logits_V.clone())
            (first if i == 0 else steps).append(time.perf_counter() - t0)
    rows = [
        ("llguidance tokenizer (once per model)", tokenizer_s * 1e3, tokenizer_s * 1e3, tokenizer_s * 1e3),
        ("matcher (once per request)", *(f(matcher_s) * 1e3 for f in (statistics.median, min, max))),
        ("mask, a request's first token", *(f(first) * 1e3 for f in (statistics.median, min, max))),
        ("mask, each later token", *(f(steps) * 1e3 for f in (statistics.median, min, max))),
    ]
    print_table("constrained decoding on SmolLM2's 49,152-token vocabulary (ms)", ["what", "median", "min", "max"], rows)
    write_results(args, "constrained", {"cpu_busy_before": busy, "rows": [dict(zip(["what", "median_ms", "min_ms", "max_ms"], r,
                                                                                    strict=True)) for r in rows]})


if __name__ == "__main__":
    main()
