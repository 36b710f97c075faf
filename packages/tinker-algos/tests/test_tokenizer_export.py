"""Tokenizers a Tinker client can load: ``tinker_ops.tokenizer_id`` (``get_info``'s
``tokenizer_id``) and ``opentinker model export-tokenizer``, checked with the client's own call,
``AutoTokenizer.from_pretrained``, offline."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from tinker_algos import plugin, tinker_ops
from tinker_algos.model.tokenizer import load_tokenizer

TEXT = "What is 4 + 7?\nAnswer: 11"


def cli() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command()(lambda: None)
    plugin.opentinker_register_commands(cli=app)
    return app


def client_tokenizer(tokenizer_id: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_id)


def test_tiny_tokenizer_id_is_a_directory_autotokenizer_loads_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tid = tinker_ops.tokenizer_id("tiny")
    assert Path(tid).is_absolute() and Path(tid, "tokenizer.json").is_file()
    assert client_tokenizer(tid).encode(TEXT) == load_tokenizer("tiny").encode(TEXT)


def test_smollm2_preset_tokenizer_id_loads_offline(monkeypatch, smollm2_dir):
    monkeypatch.setenv("OPENTINKER_CACHE", str(smollm2_dir.parent.parent))  # the cache that holds the preset
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tid = tinker_ops.tokenizer_id("smollm2-135m-instruct")
    assert Path(tid) == smollm2_dir.resolve()
    assert tinker_ops.tokenizer_id(str(smollm2_dir)) == tid  # the directory itself: the same answer
    assert client_tokenizer(tid).encode(TEXT) == load_tokenizer(smollm2_dir).encode(TEXT)


def test_hub_ids_are_reported_as_they_are(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert tinker_ops.tokenizer_id("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_export_tokenizer_writes_a_directory_autotokenizer_loads(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "tok"
    result = CliRunner().invoke(cli(), ["model", "export-tokenizer", "tiny", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out.resolve())
    tok = client_tokenizer(str(out))
    assert tok.encode(TEXT) == load_tokenizer("tiny").encode(TEXT)
    assert tok.chat_template  # the chat template travels with it

    again = CliRunner().invoke(cli(), ["model", "export-tokenizer", "tiny", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
    assert CliRunner().invoke(cli(), ["model", "export-tokenizer", "tiny", str(out), "--force"]).exit_code == 0
    bad = CliRunner().invoke(cli(), ["model", "export-tokenizer", str(tmp_path / "nope"), str(tmp_path / "o2")])
    assert bad.exit_code == 2 and "MODEL" in bad.output
