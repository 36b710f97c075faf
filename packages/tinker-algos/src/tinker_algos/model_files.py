"""Where model files come from: the ``tiny`` preset, local directories and hub ids.

* :func:`resolve_model` turns ``"tiny"``, a local directory or a hub id into something
  ``from_pretrained`` accepts; ``"tiny"`` is built once and cached under
  ``$OPENTINKER_CACHE/models/tiny-<hash>`` (default cache: ``~/.cache/opentinker``).
* :func:`build_tiny_model` writes the tiny preset (a ~1M-parameter Llama-style model with the
  character tokenizer of :func:`build_char_tokenizer`) in Hugging Face format.
* The character tokenizer maps each printable ASCII character, newline and tab to one token,
  plus the special tokens ``<pad>`` (0), ``<bos>`` (1), ``<eos>`` (2) and ``<unk>`` (3); any
  other character encodes as ``<unk>``. Encoding with ``add_special_tokens=True`` (the default)
  prepends ``<bos>``. It is built with the ``tokenizers`` library, wrapped in
  ``PreTrainedTokenizerFast`` and carries a small chat template (``role: content`` lines, then
  ``assistant: ``).
* :func:`atomic_dir` writes a directory so that readers never see it half-written (models,
  checkpoints).

:mod:`tinker_algos.tokenizer` and :mod:`tinker_algos.models` load what this module resolves.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_core.errors import OpenTinkerError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

TINY = "tiny"
TINY_FORMAT_VERSION = 1
CACHE_ENV = "OPENTINKER_CACHE"

TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "tie_word_embeddings": True,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "initializer_range": 0.02,
}


class ModelLoadError(OpenTinkerError, ValueError):
    """A model or tokenizer that cannot be used (missing, or they do not fit together)."""


# ---- the tiny preset's character tokenizer ---------------------------------------------------
PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
CHARACTERS: tuple[str, ...] = ("\t", "\n", *(chr(i) for i in range(32, 127)))
CHAR_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(CHARACTERS)  # 101
CHAR_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny preset's character-level tokenizer (deterministic: same vocabulary every call)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *CHARACTERS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    # one pre-token per character, whitespace included ([\s\S] matches newlines too)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # concatenate, no spaces between tokens
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )
    fast.chat_template = CHAR_CHAT_TEMPLATE
    return fast


# ---- the tiny preset and the cache ----------------------------------------------------------
def cache_root() -> Path:
    """``$OPENTINKER_CACHE`` or ``~/.cache/opentinker``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "opentinker"


def tiny_config(**overrides: Any) -> Any:
    """The tiny preset's ``LlamaConfig`` (vocabulary and special ids of the char tokenizer)."""
    from transformers import LlamaConfig

    cfg = {**TINY_CONFIG, **overrides}
    return LlamaConfig(
        vocab_size=CHAR_VOCAB_SIZE, pad_token_id=0, bos_token_id=1, eos_token_id=2, **cfg
    )


def tiny_fingerprint(seed: int = 0) -> str:
    """A short hash of everything that defines the tiny preset (config, vocabulary, seed)."""
    blob = json.dumps(
        {
            "v": TINY_FORMAT_VERSION,
            "config": TINY_CONFIG,
            "vocab": [*SPECIAL_TOKENS, *CHARACTERS],
            "chat": CHAR_CHAT_TEMPLATE,
            "seed": seed,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def atomic_dir(final: Path, write: Any, *, overwrite: bool) -> Path:
    """Run ``write(tmp_dir)`` then rename the temp dir (same parent) to ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} already exists; pass overwrite=True or choose another path")
    tmp = final.parent / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write(tmp)
        old = None
        if final.exists():
            old = final.parent / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def build_tiny_model(path: str | Path, *, seed: int = 0, overwrite: bool = False) -> Path:
    """Write the tiny preset (weights from ``seed``, tokenizer, config) to ``path``; return it.

    Deterministic: the same seed gives the same weights. The global torch RNG is left untouched.
    """
    import torch
    from transformers import LlamaForCausalLM

    def write(tmp: Path) -> None:
        tok = build_char_tokenizer()
        config = tiny_config()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = LlamaForCausalLM(config)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "opentinker.json").write_text(
            json.dumps({"preset": TINY, "seed": seed, "fingerprint": tiny_fingerprint(seed)}, indent=2)
        )

    return atomic_dir(Path(path), write, overwrite=overwrite)


def resolve_model(name_or_path: str | Path, *, seed: int = 0) -> str:
    """Something ``from_pretrained`` accepts.

    ``"tiny"`` (or ``"tiny:SEED"``) is built on first use under
    ``cache_root()/models/tiny-<fingerprint>`` and that directory is returned; an existing local
    directory is returned as is; anything else is taken for a hub id.
    """
    name = str(name_or_path)
    if name == TINY or name.startswith(TINY + ":"):
        if ":" in name:
            try:
                seed = int(name.split(":", 1)[1])
            except ValueError:
                raise ModelLoadError(f"model {name!r}: use 'tiny' or 'tiny:SEED' with an integer seed") from None
        target = cache_root() / "models" / f"tiny-{tiny_fingerprint(seed)}"
        if not (target / "config.json").exists():
            with contextlib.suppress(FileExistsError):  # another process built it first
                build_tiny_model(target, seed=seed)
        return str(target)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelLoadError(
                f"model directory {path} has no config.json; save the model there with "
                "save_pretrained, or use a hub id or 'tiny'"
            )
        return str(path)
    if name.startswith((".", "/", "~")):
        raise ModelLoadError(f"model path {name!r} does not exist; give a directory, a hub id or 'tiny'")
    return name
