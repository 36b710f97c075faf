"""The HTTP app on the tiny model (in process): OpenAI's shapes, usage counts, every bad input
answered with an OpenAI-shaped error and the right status, adapters loaded and unloaded live."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tinker_serve.app import create_app
from tinker_serve.served import ServedModels

KEY = "sk-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def served(tiny_dir):
    from tinker_algos.model.models import PolicyModel

    return ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "tiny", max_batch=8)


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served, api_key=KEY), raise_server_exceptions=False) as c:
        yield c


def error_of(response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert "Traceback" not in response.text
    return body["error"]


def test_models_lists_the_base(client):
    body = client.get("/v1/models", headers=AUTH).json()
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == ["tiny"]
    assert body["data"][0]["object"] == "model"


def test_completion_shape_usage_and_logprobs(client, served):
    r = client.post("/v1/completions", headers=AUTH, json={
        "model": "tiny", "prompt": ["1+1=", "2+2="], "max_tokens": 5, "temperature": 0, "n": 2, "logprobs": 3,
    })
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["choices"][0]["text"] == body["choices"][1]["text"]  # greedy: both samples alike
    lp = body["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) >= 1
    assert all(len(top) <= 3 for top in lp["top_logprobs"]) and all(v <= 0 for v in lp["token_logprobs"])
    prompt_tokens = sum(len(served.policy.tokenizer.encode(p)) for p in ("1+1=", "2+2="))
    u = body["usage"]
    assert u["prompt_tokens"] == prompt_tokens and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert 4 <= u["completion_tokens"] <= 20
    assert all(c["finish_reason"] in ("stop", "length") for c in body["choices"])


def test_chat_completion_and_its_stream_agree(client):
    req = {"model": "tiny", "messages": [{"role": "user", "content": "3+4="}], "max_tokens": 6, "temperature": 0,
           "logprobs": True, "top_logprobs": 2}
    body = client.post("/v1/chat/completions", headers=AUTH, json=req).json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert len(choice["logprobs"]["content"][0]["top_logprobs"]) == 2
    with client.stream("POST", "/v1/chat/completions", headers=AUTH,
                       json={**req, "stream": True, "stream_options": {"include_usage": True}}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert streamed == choice["message"]["content"]
    assert chunks[-1]["usage"] == body["usage"] and chunks[-1]["choices"] == []
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == choice["finish_reason"]


def test_auth_errors_are_401(client):
    assert error_of(client.get("/v1/models"), 401)["code"] == "invalid_api_key"
    assert error_of(client.get("/v1/models", headers={"Authorization": "Bearer nope"}), 401)["code"] == "invalid_api_key"
    assert client.get("/health").status_code == 200  # no key needed outside /v1


def test_unknown_model_is_404(client):
    err = error_of(client.post("/v1/completions", headers=AUTH, json={"model": "gpt-9", "prompt": "x"}), 404)
    assert err["param"] == "model" and err["code"] == "model_not_found" and "gpt-9" in err["message"]


@pytest.mark.parametrize(("body", "param"), [
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"n": 0}, "n"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"logprobs": 50}, "logprobs"),
    ({"stop": [""]}, "stop"),
    ({"echo": True, "stream": True}, "echo"),
    ({"max_tokens": 0, "stream": True}, "max_tokens"),
    ({"logprobs": -1}, "logprobs"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"prompt": [999999]}, "prompt"),
    ({"prompt": None}, "prompt"),
])
def test_bad_parameters_are_400_naming_the_field(client, body, param):
    err = error_of(client.post("/v1/completions", headers=AUTH, json={"model": "tiny", "prompt": "1+1=", **body}), 400)
    assert err["type"] == "invalid_request_error" and err["param"] == param, err


def test_a_prompt_longer_than_the_context_is_400(client, served):
    limit = served.max_positions
    err = error_of(client.post("/v1/completions", headers=AUTH, json={"model": "tiny", "prompt": "1" * (limit + 5)}), 400)
    assert err["code"] == "context_length_exceeded" and err["param"] == "prompt" and str(limit) in err["message"]
    err = error_of(client.post("/v1/completions", headers=AUTH, json={"model": "tiny", "prompt": "1+1=", "max_tokens": limit}), 400)
    assert err["param"] == "max_tokens"


def test_malformed_json_and_a_wrong_shape_are_400(client):
    r = client.post("/v1/chat/completions", headers={**AUTH, "Content-Type": "application/json"}, content=b'{"model": "tiny", "messages": [')
    assert error_of(r, 400)["code"] == "invalid_json"
    err = error_of(client.post("/v1/chat/completions", headers=AUTH, json={"model": "tiny", "messages": []}), 400)
    assert err["param"] == "messages"
    err = error_of(client.post("/v1/chat/completions", headers=AUTH, json={"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}), 400)
    assert err["param"].startswith("messages.0.role")


def test_unknown_routes_are_openai_shaped_404(client):
    assert error_of(client.get("/v1/engines", headers=AUTH), 404)["type"] == "not_found_error"


def test_the_chat_page_is_served(client):
    r = client.get("/")
    assert r.status_code == 200 and 'id="model"' in r.text and "/v1/chat/completions" in r.text


def test_hot_loading_an_adapter_from_a_run_directory(client, arithmetic_run, served):
    r = client.post("/v1/load_lora_adapter", headers=AUTH, json={"lora_name": "sums", "lora_path": str(arithmetic_run)})
    assert r.status_code == 200, r.text
    assert "sums" in [m["id"] for m in client.get("/v1/models", headers=AUTH).json()["data"]]
    ckpt = sorted((arithmetic_run / "checkpoints").iterdir())[-1]
    assert client.post("/v1/load_lora_adapter", headers=AUTH, json={"lora_name": "sums-ckpt", "lora_path": str(ckpt)}).status_code == 200
    again = client.post("/v1/load_lora_adapter", headers=AUTH, json={"lora_name": "sums", "lora_path": str(arithmetic_run)})
    assert error_of(again, 400)["param"] == "lora_name"
    missing = client.post("/v1/load_lora_adapter", headers=AUTH, json={"lora_name": "x", "lora_path": "/no/such/run"})
    assert "does not exist" in error_of(missing, 400)["message"]
    r = client.post("/v1/completions", headers=AUTH, json={"model": "sums", "prompt": "1+2=", "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200 and r.json()["model"] == "sums"
    for name in ("sums", "sums-ckpt"):
        assert client.post("/v1/unload_lora_adapter", headers=AUTH, json={"lora_name": name}).status_code == 200
    assert error_of(client.post("/v1/unload_lora_adapter", headers=AUTH, json={"lora_name": "sums"}), 404)["code"] == "model_not_found"
    assert error_of(client.post("/v1/completions", headers=AUTH, json={"model": "sums", "prompt": "1+2="}), 404)
    assert served.policy.adapter_names == []


def test_a_failing_decode_step_is_a_500_without_traceback_and_the_engine_recovers(client, served, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated device failure")

    with monkeypatch.context() as mp:
        mp.setattr(served.engine, "_forward", broken)
        err = error_of(client.post("/v1/completions", headers=AUTH, json={"model": "tiny", "prompt": "1+1=", "max_tokens": 3}), 500)
        assert err["type"] == "internal_server_error" and "simulated device failure" in err["message"]
        with client.stream("POST", "/v1/completions", headers=AUTH, json={"model": "tiny", "prompt": "1+1=", "stream": True}) as r:
            lines = [line for line in r.iter_lines() if line]
        assert json.loads(lines[-2].removeprefix("data: "))["error"]["type"] == "internal_server_error"
        assert lines[-1] == "data: [DONE]"
    assert served.engine.active_rows == 0
    assert client.post("/v1/completions", headers=AUTH, json={"model": "tiny", "prompt": "1+1=", "max_tokens": 3}).status_code == 200


def test_an_unexpected_error_is_an_openai_shaped_500_naming_only_its_type(client, served, monkeypatch):
    def boom(*args, **kwargs):
        raise KeyError("secret internals")

    monkeypatch.setattr(served.renderer, "start", boom)
    err = error_of(client.post("/v1/chat/completions", headers=AUTH, json={"model": "tiny", "messages": [{"role": "user", "content": "x"}]}), 500)
    assert err["type"] == "internal_server_error" and "KeyError" in err["message"] and "secret" not in err["message"]
