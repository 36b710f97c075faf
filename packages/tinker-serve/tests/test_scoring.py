"""Scoring on ``/v1/completions`` (``echo``, ``max_tokens: 0``) and the routes harnesses ask for
(``GET /v1/models/{id}``, ``/tokenize``, ``/detokenize``, ``/tokenizer_info``), on the tiny
model in process. The prompt logprobs are checked against an oracle: the same token ids through
transformers' own model loaded from the same directory, ``log_softmax`` of the logits."""

from __future__ import annotations

import math

import pytest
import torch
from fastapi.testclient import TestClient

from tinker_serve.app import create_app
from tinker_serve.scoring import MAX_SCORED_PROMPTS
from tinker_serve.served import ServedModels

KEY = "sk-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def served(tiny_dir):
    from tinker_algos.model.models import PolicyModel

    return ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "tiny", max_batch=8)


@pytest.fixture(scope="module")
def client(served, arithmetic_run):
    with TestClient(create_app(served, api_key=KEY), raise_server_exceptions=False) as c:
        served.load_adapter("sums", arithmetic_run)
        yield c


def oracle_logprobs(model_dir, ids: list[int], adapter_dir=None) -> list[float]:
    """``log p(ids[t] | ids[:t])`` for t >= 1 with transformers (and peft for an adapter)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1).tolist()


def test_echo_returns_the_prompt_logprobs_of_the_model(client, tiny_dir):
    ids = [1, *range(20, 32)]
    r = client.post("/v1/completions", headers=AUTH, json={
        "model": "tiny", "prompt": ids, "echo": True, "logprobs": 3, "max_tokens": 0, "temperature": 0})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(ids) and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert choice["text"] == "".join(lp["tokens"]) and choice["finish_reason"] == "length"
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(ids))]
    want = oracle_logprobs(tiny_dir, ids)
    assert lp["token_logprobs"][1:] == pytest.approx(want, abs=1e-4)
    for value, top in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:], strict=True):
        assert len(top) == 3 and max(top.values()) >= value - 1e-6
        assert all(v <= 0 for v in top.values())
    assert r.json()["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}


def test_the_echo_is_the_prompt_as_sent_without_the_bos_text(client, served):
    """A text prompt is encoded with the tokenizer's ``<bos>`` first: the echo keeps its entry
    (logprob None, aligned with the ids) with the empty text, so the text is the prompt as sent."""
    tok = served.policy.tokenizer
    ids = tok("3+4=")["input_ids"]
    assert ids[0] == tok.bos_token_id
    for prompt in ("3+4=", ids):
        r = client.post("/v1/completions", headers=AUTH, json={
            "model": "tiny", "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 0})
        choice = r.json()["choices"][0]
        lp = choice["logprobs"]
        assert choice["text"] == "3+4=" and lp["tokens"] == ["", "3", "+", "4", "="]
        assert len(lp["token_logprobs"]) == len(ids) and lp["token_logprobs"][0] is None
        assert lp["text_offset"] == [0, 0, 1, 2, 3]


def test_echo_with_generation_is_prompt_then_completion(client, served):
    """lm-eval's loglikelihood request: ``max_tokens: 1``; the generated token comes last and a
    greedy token's logprob equals its top value exactly (how lm-eval tells ``is_greedy``)."""
    body = {"model": "tiny", "prompt": ["1+1=", "2+2="], "logprobs": 1, "max_tokens": 3, "temperature": 0}
    plain = client.post("/v1/completions", headers=AUTH, json=body).json()
    echoed = client.post("/v1/completions", headers=AUTH, json={**body, "echo": True}).json()
    for p, e, prompt in zip(plain["choices"], echoed["choices"], body["prompt"], strict=True):
        ids = served.policy.tokenizer(prompt)["input_ids"]
        lp = e["logprobs"]
        assert e["text"].endswith(p["text"]) and e["text"] == "".join(lp["tokens"])
        assert lp["tokens"][len(ids):] == p["logprobs"]["tokens"]
        assert lp["token_logprobs"][len(ids):] == pytest.approx(p["logprobs"]["token_logprobs"], abs=1e-5)
        assert lp["text_offset"][len(ids)] == len("".join(lp["tokens"][:len(ids)]))
        greedy_next = lp["token_logprobs"][len(ids)]
        assert math.isclose(greedy_next, max(lp["top_logprobs"][len(ids)].values()), abs_tol=1e-5)
        for value, top in zip(lp["token_logprobs"][1:len(ids)], lp["top_logprobs"][1:len(ids)], strict=True):
            best = max(top.values())
            assert value < best or value == best  # exact equality when the token is the top one
    assert echoed["usage"] == plain["usage"]


def test_echo_scores_on_the_requested_adapter(client, tiny_dir, arithmetic_run, served):
    ids = served.policy.tokenizer("3+4=7\n")["input_ids"]
    got = {m: client.post("/v1/completions", headers=AUTH, json={
        "model": m, "prompt": ids, "echo": True, "logprobs": 0, "max_tokens": 0}).json()["choices"][0]["logprobs"]
        for m in ("tiny", "sums")}
    adapter_dir = served.models["sums"].source
    assert got["sums"]["token_logprobs"][1:] == pytest.approx(oracle_logprobs(tiny_dir, ids, adapter_dir), abs=1e-4)
    assert got["tiny"]["token_logprobs"][1:] == pytest.approx(oracle_logprobs(tiny_dir, ids), abs=1e-4)
    assert got["sums"]["token_logprobs"] != got["tiny"]["token_logprobs"]
    assert got["tiny"]["top_logprobs"][1] == {}  # logprobs: 0 -> no alternatives


def test_max_tokens_zero_without_echo_is_an_empty_completion(client):
    body = client.post("/v1/completions", headers=AUTH, json={"model": "tiny", "prompt": "1+1=", "max_tokens": 0}).json()
    assert body["choices"] == [{"index": 0, "text": "", "finish_reason": "length", "logprobs": None}]
    assert body["usage"]["completion_tokens"] == 0


def test_scoring_bounds_are_400_naming_the_field(client, served):
    def err(body: dict) -> dict:
        r = client.post("/v1/completions", headers=AUTH, json={"model": "tiny", "prompt": "1", **body})
        assert r.status_code == 400, r.text
        return r.json()["error"]

    assert err({"echo": True, "stream": True})["param"] == "echo"
    assert err({"max_tokens": 0, "stream": True})["param"] == "max_tokens"
    assert err({"echo": True, "logprobs": 21})["param"] == "logprobs"
    assert err({"echo": True, "prompt": ["1"] * (MAX_SCORED_PROMPTS + 1), "max_tokens": 0})["param"] == "prompt"
    limit = served.max_positions
    e = err({"echo": True, "prompt": [5] * (limit + 1), "max_tokens": 0})
    assert e["param"] == "prompt" and e["code"] == "context_length_exceeded"


def test_models_retrieve_and_a_clear_404(client):
    assert client.get("/v1/models/tiny", headers=AUTH).json()["id"] == "tiny"
    assert client.get("/v1/models/sums", headers=AUTH).json()["parent"] == "tiny"
    r = client.get("/v1/models/gpt-9", headers=AUTH)
    assert r.status_code == 404
    assert r.json()["error"] == {"message": "The model `gpt-9` does not exist.", "type": "invalid_request_error",
                                 "param": "model", "code": "model_not_found"}
    assert client.get("/v1/models/tiny").status_code == 401


def test_tokenizer_routes_round_trip_and_are_bounded(client, served):
    tok = served.policy.tokenizer
    r = client.post("/tokenize", headers=AUTH, json={"prompt": "12+7=", "add_special_tokens": False}).json()
    assert r["tokens"] == tok("12+7=", add_special_tokens=False)["input_ids"] and r["count"] == 5
    assert r["max_model_len"] == served.max_positions
    assert client.post("/tokenize", headers=AUTH, json={"prompt": "1"}).json()["tokens"][0] == tok.bos_token_id
    assert client.post("/detokenize", headers=AUTH, json={"tokens": r["tokens"]}).json() == {"prompt": "12+7="}
    info = client.get("/tokenizer_info", headers=AUTH).json()
    assert info["eos_token"] == tok.eos_token and info["bos_token"] == tok.bos_token
    assert info["model_max_length"] == served.max_positions and info["chat_template"]
    assert client.get("/tokenizer_info", headers=AUTH, params={"model": "nope"}).status_code == 404
    assert client.post("/tokenize", json={"prompt": "1"}).status_code == 401
    bad = client.post("/detokenize", headers=AUTH, json={"tokens": [len(tok)]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    long = client.post("/detokenize", headers=AUTH, json={"tokens": [5] * (served.max_positions + 1)})
    assert long.status_code == 400 and long.json()["error"]["param"] == "tokens"
    huge = client.post("/tokenize", headers=AUTH, json={"prompt": "1" * (served.max_prompt_chars + 1)})
    assert huge.status_code == 400 and huge.json()["error"]["code"] == "context_length_exceeded"
