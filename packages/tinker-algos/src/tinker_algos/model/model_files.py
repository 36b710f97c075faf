"""Where model files come from: the presets, local directories and hub ids.

* :func:`resolve_model` turns a preset, a local directory or a hub id into something
  ``from_pretrained`` accepts; ``"tiny"`` is built once and cached under
  ``$OPENTINKER_CACHE/models/tiny-<hash>`` (default cache: ``~/.cache/opentinker``); a registry
  preset such as ``"smollm2-135m-instruct"`` is downloaded and imported there once
  (:func:`tinker_algos.hub.fetch_preset`). With ``HF_HUB_OFFLINE=1`` a hub id missing from the
  local Hugging Face cache is a one-line :class:`ModelLoadError`.
* :func:`build_tiny_model` writes the tiny preset (a ~1M-parameter Llama-style model with the
  character tokenizer of :func:`build_char_tokenizer`) in Hugging Face format.
* The character tokenizer maps each printable ASCII character, newline and tab to one token,
  plus the special tokens ``<pad>`` (0), ``<bos>`` (1), ``<eos>`` (2) and ``<unk>`` (3); any
  other character encodes as ``<unk>``. Encoding with ``add_special_tokens=True`` (the default)
  prepends ``<bos>``. It is built with the ``tokenizers`` library, wrapped in
  ``PreTrainedTokenizerFast`` and carries a small chat template (``role: content`` lines, then
  ``assistant: ``).
* :func:`atomic_dir` writes a directory so that readers never see it half-written (models,
  checkpoints); it, :func:`cache_root` and :class:`ModelLoadError` live in
  :mod:`tinker_algos.hub.cache` and are re-exported here.

:mod:`tinker_algos.model.tokenizer` and :mod:`tinker_algos.model.models` load what this module resolves.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_algos.hub.cache import CACHE_ENV, ModelLoadError, atomic_dir, cache_root  # noqa: F401 (re-exported)
from tinker_algos.hub.presets import PRESETS, fetch_preset

if TYPE_CHECKING:
    from transformers import LlamaConfig, PreTrainedTokenizerFast

TINY = "tiny"
TINY_FORMAT_VERSION = 1

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
def tiny_config(**overrides: Any) -> LlamaConfig:
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


def presets() -> list[str]:
    """The preset model names: ``tiny`` and every registry preset."""
    return [TINY, *sorted(PRESETS)]


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) forbids downloads."""
    return any(os.environ.get(v, "").upper() in {"1", "ON", "YES", "TRUE"} for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def in_hf_cache(repo_id: str, revision: str | None = None) -> bool:
    """Whether the local Hugging Face cache holds ``repo_id``'s ``config.json``."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    except Exception:  # a malformed id: let from_pretrained give its own error
        return True
    return isinstance(found, str)


def resolve_model(name_or_path: str | Path, *, seed: int = 0, field: str = "model", revision: str | None = None) -> str:
    """Something ``from_pretrained`` accepts.

    ``"tiny"`` (or ``"tiny:SEED"``) is built on first use under
    ``cache_root()/models/tiny-<fingerprint>`` and that directory is returned; a registry preset
    (``"smollm2-135m-instruct"``) is fetched into ``cache_root()/models/<name>`` once; an
    existing local directory is returned as is; anything else is taken for a hub id, which must
    be in the local Hugging Face cache when ``HF_HUB_OFFLINE=1``. Errors name ``field`` (the
    config field, e.g. ``model.name`` or ``model.tokenizer``).
    """
    name = str(name_or_path)
    if name == TINY or name.startswith(TINY + ":"):
        if ":" in name:
            try:
                seed = int(name.split(":", 1)[1])
            except ValueError:
                raise ModelLoadError(f"{field} {name!r}: use 'tiny' or 'tiny:SEED' with an integer seed") from None
        target = cache_root() / "models" / f"tiny-{tiny_fingerprint(seed)}"
        if not (target / "config.json").exists():
            with contextlib.suppress(FileExistsError):  # another process built it first
                build_tiny_model(target, seed=seed)
        return str(target)
    if name in PRESETS:
        return str(fetch_preset(name))
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelLoadError(
                f"{field}: directory {path} has no config.json; save the model there with "
                "save_pretrained, or give a hub id or a preset"
            )
        return str(path)
    if name.startswith((".", "/", "~")) or path.is_file():
        raise ModelLoadError(
            f"{field}: path {name!r} does not exist or is not a directory; give a model directory, "
            f"a hub id or a preset ({', '.join(presets())})"
        )
    if hub_offline() and not in_hf_cache(name, revision):
        raise ModelLoadError(
            f"{field} {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 forbids "
            f"downloading it; download it once with network (`hf download {name}`), or give a local "
            f"directory or a preset ({', '.join(presets())})"
        )
    return name
