"""Tokenizers: loading, and rendering the prompts given to ``sample()``.

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
from collections.abc import Sequence
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
from tinker_algos.model.prompts import render_messages

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


def _is_messages(prompt: object) -> bool:
    return isinstance(prompt, Sequence) and not isinstance(prompt, str)


def render_prompt(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[dict[str, str]],
    *,
    chat: bool | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """Render a prompt to text.

    * chat messages (a list of ``{"role", "content"}``): the tokenizer's chat template when it has
      one, else plain ``role: content`` lines followed by ``assistant: ``.
    * a string: used as is (completion style), unless ``chat=True``, which wraps it as one user
      message first.

    Templated text already contains any special tokens the template adds (e.g. ``<bos>``); encode
    it with :func:`encode_prompt`, which then adds no special tokens of its own.
    """
    if isinstance(prompt, str):
        if not chat:
            return prompt
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt}]
    elif _is_messages(prompt):
        messages = [dict(m) for m in prompt]
        for i, m in enumerate(messages):
            if "role" not in m or "content" not in m:
                raise ValueError(f"prompt message {i} needs 'role' and 'content' keys, got {sorted(m)}")
    else:
        raise TypeError(f"prompt must be a str or a list of chat messages, got {type(prompt).__name__}")
    return render_messages(tokenizer, getattr(tokenizer, "chat_template", None) or None, messages, add_generation_prompt)


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[dict[str, str]] | Sequence[int],
    *,
    chat: bool | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of a prompt: ids pass through; text is rendered with :func:`render_prompt`.

    Raw strings are encoded with the tokenizer's special tokens (e.g. a leading ``<bos>``);
    templated prompts without (the template adds them).
    """
    if _is_messages(prompt) and all(isinstance(x, int) for x in prompt):
        return [int(x) for x in prompt]  # type: ignore[arg-type,union-attr]
    templated = not isinstance(prompt, str) or bool(chat)
    if templated and not getattr(tokenizer, "chat_template", None):
        templated = False  # plain fallback rendering has no special tokens: add them
    text = render_prompt(tokenizer, prompt, chat=chat, add_generation_prompt=add_generation_prompt)  # type: ignore[arg-type]
    return list(tokenizer.encode(text, add_special_tokens=not templated))


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
    "encode_prompt",
    "load_tokenizer",
    "render_prompt",
    "roundtrips",
]
