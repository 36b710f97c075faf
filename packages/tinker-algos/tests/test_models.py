"""Models, tokenizer, device selection and LoRA adapters (tiny model, offline, CPU)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tinker_algos.model.device import DeviceError, resolve_device
from tinker_algos.model.models import (
    LoraSpec,
    ModelLoadError,
    PolicyModel,
    build_tiny_model,
    load_model,
    resolve_model,
    tiny_config,
)
from tinker_algos.model.tokenizer import (
    CHAR_VOCAB_SIZE,
    build_char_tokenizer,
    encode_prompt,
    load_tokenizer,
    render_prompt,
)

TEXT = "Hello,  world!\n\tindented line\n\n  12 + 34 = 46 ~{}|\\"


# ---- tokenizer ----------------------------------------------------------------------------------
def test_char_tokenizer_round_trips_spaces_newlines_and_tabs():
    tok = build_char_tokenizer()
    ids = tok.encode(TEXT, add_special_tokens=False)
    assert len(ids) == len(TEXT)  # one token per character
    assert tok.decode(ids) == TEXT
    assert len(tok) == CHAR_VOCAB_SIZE == 101
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)


def test_char_tokenizer_adds_bos_and_maps_unknown_characters_to_unk():
    tok = build_char_tokenizer()
    assert tok.encode("ab")[0] == tok.bos_token_id
    assert tok.encode("é", add_special_tokens=False) == [tok.unk_token_id]
    ids = tok.encode("a b") + [tok.eos_token_id]
    assert tok.decode(ids, skip_special_tokens=True) == "a b"


def test_saved_tokenizer_round_trips_through_load_tokenizer_and_auto_tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    for tok in (load_tokenizer(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)):
        ids = tok.encode(TEXT, add_special_tokens=False)
        assert tok.decode(ids) == TEXT
        assert len(tok) == CHAR_VOCAB_SIZE


def test_load_tokenizer_survives_a_qwen2_config(tmp_path):
    """The pitfall: AutoTokenizer + qwen2 config drops spaces; load_tokenizer must not."""
    from transformers import Qwen2Config

    build_char_tokenizer().save_pretrained(tmp_path)
    Qwen2Config(vocab_size=CHAR_VOCAB_SIZE, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1).save_pretrained(tmp_path)
    tok = load_tokenizer(tmp_path)
    assert tok.decode(tok.encode(TEXT, add_special_tokens=False)) == TEXT


def test_chat_prompts_use_the_template_and_get_exactly_one_bos():
    tok = build_char_tokenizer()
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    text = render_prompt(tok, msgs)
    assert text == "<bos>system: be brief\nuser: 2+2?\nassistant: "
    ids = encode_prompt(tok, msgs)
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == "system: be brief\nuser: 2+2?\nassistant: "
    # strings are raw text unless chat=True
    assert render_prompt(tok, "12+3=") == "12+3="
    assert render_prompt(tok, "hi", chat=True) == "<bos>user: hi\nassistant: "
    assert encode_prompt(tok, [5, 6, 7]) == [5, 6, 7]
    with pytest.raises(ValueError, match="role"):
        render_prompt(tok, [{"content": "x"}])


def test_messages_without_a_chat_template_fall_back_to_plain_lines():
    tok = build_char_tokenizer()
    tok.chat_template = None
    assert render_prompt(tok, [{"role": "user", "content": "q"}]) == "user: q\nassistant: "
    assert encode_prompt(tok, [{"role": "user", "content": "q"}])[0] == tok.bos_token_id


# ---- the tiny preset and loading ------------------------------------------------------------------
def test_tiny_preset_shape_and_parameter_count(policy):
    cfg = policy.model.config
    assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers) == ("llama", 128, 4)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size) == (4, 2, 512)
    assert cfg.tie_word_embeddings and cfg.vocab_size == CHAR_VOCAB_SIZE
    n = sum(p.numel() for p in policy.model.parameters())
    assert 0.9e6 < n < 1.1e6


def test_build_tiny_model_is_deterministic_per_seed(tmp_path, tiny_dir):
    from safetensors.torch import load_file

    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    a, b, c = (load_file(str(d / "model.safetensors")) for d in (tiny_dir, again, other))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.layers.0.mlp.up_proj.weight"], c["model.layers.0.mlp.up_proj.weight"])
    with pytest.raises(FileExistsError, match="overwrite"):
        build_tiny_model(tmp_path / "again")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_resolve_tiny_builds_once_into_the_cache(_opentinker_cache):
    path = resolve_model("tiny")
    assert path.startswith(str(_opentinker_cache / "models" / "tiny-"))
    stamp = os.stat(os.path.join(path, "model.safetensors")).st_mtime_ns
    assert resolve_model("tiny") == path
    assert os.stat(os.path.join(path, "model.safetensors")).st_mtime_ns == stamp
    assert json.loads(Path(path, "opentinker.json").read_text())["preset"] == "tiny"
    assert resolve_model("tiny:3") != path
    policy = PolicyModel.load("tiny", device="cpu")
    assert policy.model_id == "tiny"


def test_offline_from_pretrained_loads_the_saved_model(tiny_dir):
    from transformers import AutoModelForCausalLM

    assert os.environ["HF_HUB_OFFLINE"] == "1"
    raw = AutoModelForCausalLM.from_pretrained(tiny_dir)
    model = load_model(tiny_dir, spec=resolve_device("cpu", "fp32"))
    for (n1, p1), (n2, p2) in zip(raw.named_parameters(), model.named_parameters(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied


def test_missing_models_fail_clearly(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model("./no/such/dir")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="config.json"):
        resolve_model(tmp_path / "empty")
    with pytest.raises(ModelLoadError, match="^model 'nobody/no-such-model-xyz' is not in the local Hugging Face cache"):
        load_model("nobody/no-such-model-xyz", spec=resolve_device("cpu"))  # HF_HUB_OFFLINE=1 (conftest)


def test_vocab_mismatch_is_an_error_at_load(tmp_path):
    from transformers import LlamaForCausalLM

    small = tiny_config(num_hidden_layers=1)
    small.vocab_size = 50
    LlamaForCausalLM(small).save_pretrained(tmp_path)
    build_char_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=r"tokenizer has 101 tokens but model .* embeds only 50"):
        PolicyModel.load(tmp_path, device="cpu")


# ---- device -------------------------------------------------------------------------------------
def test_resolve_device_defaults_and_overrides(monkeypatch):
    spec = resolve_device("cpu")
    assert spec.device.type == "cpu" and spec.param_dtype == torch.float32 and spec.autocast_dtype is None
    assert resolve_device("cpu", "bf16").param_dtype == torch.bfloat16
    monkeypatch.setenv("OPENTINKER_PRECISION", "bf16")
    assert resolve_device("cpu").precision == "bf16"
    assert resolve_device("cpu", "fp32").precision == "fp32"  # argument beats env
    with pytest.raises(ValueError, match="precision: 'fp64' is unknown"):
        resolve_device("cpu", "fp64")
    if not torch.cuda.is_available():
        monkeypatch.delenv("OPENTINKER_PRECISION")
        assert resolve_device().device.type == "cpu" and resolve_device().precision == "fp32"
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")


def test_a_device_this_machine_lacks_is_one_error_listing_the_available_ones(monkeypatch):
    with pytest.raises(DeviceError, match=r"^device: 'banana' is not a torch device"):
        resolve_device("banana")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match=r"^device: 'cuda:99' was asked for but CUDA is not available here; available: cpu"):
        resolve_device("cuda:99")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a machine with two GPUs
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(DeviceError, match=r"^device: 'cuda:99' does not exist on this machine; available: cpu, cuda:0, cuda:1$"):
        resolve_device("cuda:99")
    error = DeviceError("device", "why")
    assert str(error.in_config()) == "model.device: why" and str(DeviceError("precision", "x").in_config()) == "model.dtype: x"


# ---- LoRA adapters ------------------------------------------------------------------------------
def test_named_adapters_share_one_base_and_switch(policy, batch_factory):
    base_lp = _logprobs(policy, batch_factory)
    policy.add_adapter("alpha", LoraSpec(rank=4, alpha=8, target_modules=["q_proj", "v_proj"]), seed=1)
    policy.add_adapter("beta", LoraSpec(rank=2), seed=2)
    assert policy.adapter_names == ["alpha", "beta"] and policy.active_adapter == "beta"
    # freshly initialised adapters do not change the model
    assert torch.equal(_logprobs(policy, batch_factory), base_lp)
    a_params = policy.adapter_parameters("alpha")
    b_params = policy.adapter_parameters("beta")
    assert len(a_params) == 2 * 2 * 4  # (A, B) x (q, v) x 4 layers
    assert len(b_params) == 2 * 7 * 4  # all-linear: 7 projections per layer
    assert not any(p.requires_grad for p in a_params) and all(p.requires_grad for p in b_params)
    with policy.using_adapter("alpha"):
        assert policy.active_adapter == "alpha" and all(p.requires_grad for p in a_params)
    assert policy.active_adapter == "beta"
    base_params = [p for n, p in policy.model.named_parameters() if "lora_" not in n]
    assert not any(p.requires_grad for p in base_params)
    with pytest.raises(ValueError, match="already exists"):
        policy.add_adapter("alpha")
    with pytest.raises(ValueError, match="unknown adapter 'gamma'"):
        policy.set_adapter("gamma")
    with pytest.raises(ValueError, match="name the adapter"):
        policy.trainable_parameters(None)
    for bad in ("a", "lo", "x.y", ""):
        with pytest.raises(ValueError, match="adapter name"):
            policy.add_adapter(bad)
    policy.remove_adapter("beta")
    assert policy.adapter_names == ["alpha"] and policy.active_adapter == "alpha"
    policy.remove_adapter("alpha")
    assert not policy.is_peft and policy.adapter_names == []
    assert not any("lora_" in n for n, _ in policy.model.named_parameters())
    assert torch.equal(_logprobs(policy, batch_factory), base_lp)


def test_load_adapter_adds_a_saved_adapter_under_a_new_name(policy, batch_factory, tmp_path):
    policy.add_adapter("src", LoraSpec(rank=2, target_modules=["q_proj"]), seed=3)
    with torch.no_grad():
        for p in policy.adapter_parameters("src"):
            p.add_(0.05)
    src_lp = _logprobs(policy, batch_factory)
    policy.model.save_pretrained(tmp_path, selected_adapters=["src"])
    policy.load_adapter("copy", tmp_path / "src")
    assert policy.active_adapter == "copy" and policy.lora_specs["copy"].rank == 2
    torch.testing.assert_close(_logprobs(policy, batch_factory), src_lp)


def test_adapter_seed_makes_init_deterministic_without_touching_global_rng(tiny_dir):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    p1 = PolicyModel.load(tiny_dir, device="cpu")
    p1.add_adapter("x", seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    p2 = PolicyModel.load(tiny_dir, device="cpu")
    p2.add_adapter("x", seed=7)
    for a, b in zip(p1.adapter_parameters("x"), p2.adapter_parameters("x"), strict=True):
        assert torch.equal(a, b)


def _logprobs(policy, batch_factory):
    from tinker_algos.model.models import sequence_logprobs

    b = batch_factory(policy.tokenizer, ["1+1=", "hello"], ["2", " there"])
    with torch.no_grad():
        return sequence_logprobs(policy.module, torch.as_tensor(b.tokens_B_T), torch.as_tensor(b.attention_mask_B_T))


def test_adding_or_loading_a_lora_adapter_drops_only_transformers_is_gradient_checkpointing_warning(tmp_path):
    """peft reads transformers' deprecated ``is_gradient_checkpointing`` each time it wraps a model:
    a FutureWarning on every LoRA command, that is not the user's to act on."""
    import warnings

    from peft import get_peft_model

    from tinker_algos.model.models import LoraSpec

    def future_warnings(call):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            call()
        return [str(w.message) for w in seen if issubclass(w.category, FutureWarning)]

    bare = PolicyModel.load("tiny", device="cpu")
    assert any("is_gradient_checkpointing" in m for m in future_warnings(lambda: get_peft_model(bare.model, LoraSpec().to_peft())))
    policy = PolicyModel.load("tiny", device="cpu")
    assert not [m for m in future_warnings(lambda: policy.add_adapter("mine")) if "is_gradient_checkpointing" in m]
    policy.model.save_pretrained(tmp_path / "saved")
    fresh = PolicyModel.load("tiny", device="cpu")
    assert not [m for m in future_warnings(lambda: fresh.load_adapter("mine", tmp_path / "saved" / "mine")) if "is_gradient_checkpointing" in m]
