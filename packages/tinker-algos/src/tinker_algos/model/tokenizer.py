"""Tokenizers: loading them, and the tiny preset's character tokenizer.

The prompts given to ``sample()`` are rendered and encoded by
:func:`tinker_algos.model.prompts.render_prompt` and :func:`~tinker_algos.model.prompts.encode_prompt`
(re-exported here).

Environment observations in rollouts go through :class:`tinker_algos.model.prompts.PromptRenderer`
(``model.chat_template``, multi-turn deltas); both render chat messages with
:func:`tinker_algos.model.prompts.render_messages`.

The tiny preset's character-level tokenizer is built by
:func:`tinker_algos.model.model_files.build_char_tokenizer` (re-exported here with its vocabulary).

Loading pitfall: ``AutoTokenizer`` picks the tokenizer class from the model's ``config.json``; with
a ``qwen2`` config it returns a ``Qwen2Tokenizer`` that re-derives its own pre-tokenizer and drops
spaces and newlines of a character vocabulary. :func:`load_tokenizer` therefore loads tokenizers
saved as a generic ``tokenizers`` backend with ``PreTrainedTokenizerFast`` directly.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from tinker_algos.model.model_files import (  # re-exported: their home was this module
    BOS,
    CHAR_CHAT_TEMPLATE,
    CHAR_VOCAB_SIZE,
    CHARACTERS,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    UNK,
    build_char_tokenizer,
    resolve_model,
)
from tinker_algos.model.prompts import (
    encode_prompt as encode_prompt,  # re-exported: its home was this module
)
from tinker_algos.model.prompts import (
    render_prompt as render_prompt,  # re-exported: its home was this module
)

logger = logging.getLogger(__name__)

_GENERIC_CLASSES = {"PreTrainedTokenizerFast", "TokenizersBackend"}
ROUNDTRIP_PROBE = "a b  c\n\td"


def _tokenizer_class_of(path: str) -> str | None:
    """``tokenizer_class`` from ``tokenizer_config.json`` (local dir or HF cache/hub), or None."""
    try:
        from transformers.utils import cached_file

        cfg = cached_file(path, "tokenizer_config.json", _raise_exceptions_for_missing_entries=False)
    except Exception:  # no such repo / offline miss: let AutoTokenizer produce the real error
        return None
    if not cfg:
        return None
    try:
        return json.loads(Path(cfg).read_text()).get("tokenizer_class")
    except (OSError, ValueError):
        return None


def roundtrips(tokenizer: PreTrainedTokenizerBase, text: str = ROUNDTRIP_PROBE) -> bool:
    """Whether ``decode(encode(text))`` gives ``text`` back (spaces, newlines and tabs kept)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False) == text


def load_tokenizer(name_or_path: str | Path, **kwargs: Any) -> PreTrainedTokenizerBase:
    """Load the tokenizer of a model: ``"tiny"``, a local directory or a hub id.

    Generic ``tokenizers``-backed tokenizers load with ``PreTrainedTokenizerFast`` (see the module
    docstring); others with ``AutoTokenizer``. A pad token is set (to eos) when missing. Logs a
    warning when the tokenizer does not round-trip spaces and newlines.
    """
    path = resolve_model(str(name_or_path))
    cls_name = _tokenizer_class_of(path)
    tok: PreTrainedTokenizerBase
    if cls_name in _GENERIC_CLASSES:
        tok = PreTrainedTokenizerFast.from_pretrained(path, **kwargs)
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path, **kwargs)
    if tok.pad_token_id is None and tok.eos_token_id is not None:
        tok.pad_token = tok.eos_token
    if not roundtrips(tok):
        logger.warning(
            "tokenizer of %s does not round-trip %r (spaces/newlines changed); check its "
            "pre-tokenizer and the tokenizer_class in tokenizer_config.json",
            name_or_path,
            ROUNDTRIP_PROBE,
        )
    return tok


def build_tiny_chat_model(path: str | Path, tokenizer_dir: str | Path, *, seed: int = 0) -> Path:
    """Write a random-init one-layer Llama (hidden size 32) with the tokenizer and chat template of
    ``tokenizer_dir`` (e.g. SmolLM2's) to ``path``; return it. Fast to sample, and every prompt
    renders and tokenizes as the real model's would: for tests of chat templates, tool rendering
    and token-exact episodes. Deterministic in ``seed``; the global torch RNG is left untouched."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = load_tokenizer(tokenizer_dir)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, tie_word_embeddings=True, max_position_embeddings=2048,
        bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )
    out = Path(path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


__all__ = [
    "BOS",
    "CHAR_CHAT_TEMPLATE",
    "CHAR_VOCAB_SIZE",
    "CHARACTERS",
    "EOS",
    "PAD",
    "SPECIAL_TOKENS",
    "UNK",
    "build_char_tokenizer",
    "build_tiny_chat_model",
    "encode_prompt",
    "load_tokenizer",
    "render_prompt",
    "roundtrips",
]
