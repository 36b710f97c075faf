"""``opentinker serve`` survives its inputs (issue 34's probes, one test each): bodies over the
size limit are 413, prompts longer than the context could hold are refused before they are
tokenized, a failed adapter load leaves the engine exactly as it was, and connections that never
finish sending are closed; after each probe the server still answers (a real uvicorn server on
127.0.0.1 with the tiny model)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
from pathlib import Path

import httpx
import pytest

from tinker_core.http_limits import HttpLimits, serve_in_thread, uvicorn_config
from tinker_serve.app import create_app
from tinker_serve.served import ServedModels

LIMIT = 256 * 1024
LIMITS = HttpLimits(LIMIT, header_timeout_s=1.0, body_timeout_s=1.0)


@pytest.fixture(scope="module")
def served(tiny_dir):
    from tinker_algos.model.models import PolicyModel

    return ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "tiny", max_batch=8)


@pytest.fixture(scope="module")
def url(served):
    import uvicorn

    server = uvicorn.Server(uvicorn_config(create_app(served, limits=LIMITS), LIMITS, host="127.0.0.1", port=0,
                                           log_level="warning", lifespan="on"))
    with serve_in_thread(server, "test-hardening", "the hardened server") as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def adapter_dir(tiny_dir, tmp_path_factory) -> Path:
    """A PEFT adapter of the tiny model, saved as ``save_pretrained`` does."""
    from tinker_algos.model.models import LoraSpec, PolicyModel

    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    policy.add_adapter("probe", LoraSpec(rank=4, alpha=8), seed=0)
    out = tmp_path_factory.mktemp("adapter") / "good"
    policy.model.save_pretrained(str(out), selected_adapters=["probe"])
    found = [p.parent for p in out.rglob("adapter_config.json")]
    return found[0]


def still_serving(url: str) -> None:
    """The base model still completes, and /health answers."""
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    r = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": "1+1=", "max_tokens": 4, "temperature": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("length", "stop")


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert "Traceback" not in r.text
    return r.json()["error"]


def test_a_body_over_the_limit_is_413(url) -> None:
    err = error_of(httpx.post(f"{url}/v1/completions", content=b"{" + b" " * LIMIT + b"}",
                              headers={"content-type": "application/json"}, timeout=30), 413)
    assert "--max-request-bytes" in err["message"] and err["code"] == "request_too_large"

    def stream():
        yield b'{"model": "tiny", "prompt": "'
        for _ in range(LIMIT // 4096 + 2):
            yield b"x" * 4096
        yield b'"}'

    error_of(httpx.post(f"{url}/v1/completions", content=stream(), headers={"content-type": "application/json"},
                        timeout=30), 413)
    still_serving(url)


@pytest.mark.parametrize("route", ["completions", "chat/completions"])
def test_a_prompt_longer_than_the_context_could_hold_is_refused_before_tokenizing(url, served, route) -> None:
    text = "1" * (served.max_prompt_chars + 1)  # under the body limit, over what 1,024 tokens can hold
    body = ({"prompt": text} if route == "completions" else {"messages": [{"role": "user", "content": text}]})
    err = error_of(httpx.post(f"{url}/v1/{route}", json={"model": "tiny", **body}, timeout=30), 400)
    assert err["code"] == "context_length_exceeded" and "characters" in err["message"]
    still_serving(url)


def test_a_token_id_prompt_longer_than_the_context_is_400(url, served) -> None:
    err = error_of(httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": [1] * (served.max_positions + 1)},
                              timeout=30), 400)
    assert err["code"] == "context_length_exceeded"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong-shape", "unknown-module"])
def test_a_failed_adapter_load_leaves_the_engine_as_it_was(url, served, adapter_dir, tmp_path, damage) -> None:
    from safetensors.torch import load_file, save_file

    bad = tmp_path / damage
    shutil.copytree(adapter_dir, bad)
    weights = bad / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    if damage == "garbage":
        weights.write_bytes(b"\x00garbage" * 100)
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "wrong-shape":
        save_file({k: v[:, :1].contiguous() if "lora_A" in k else v for k, v in tensors.items()}, str(weights))
    else:
        save_file({k.replace("layers.0.", "layers.99."): v for k, v in tensors.items()}, str(weights))
    before = (sorted(served.models), served.policy.adapter_names, served.policy.is_peft)
    r = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "broken", "lora_path": str(bad)}, timeout=60)
    assert error_of(r, 400)["param"] == "lora_path"
    assert (sorted(served.models), served.policy.adapter_names, served.policy.is_peft) == before
    still_serving(url)
    # and a good adapter still joins and serves, then leaves
    ok = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "good", "lora_path": str(adapter_dir)}, timeout=60)
    assert ok.status_code == 200, ok.text
    r = httpx.post(f"{url}/v1/completions", json={"model": "good", "prompt": "1+1=", "max_tokens": 2}, timeout=120)
    assert r.status_code == 200, r.text
    assert httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "good"}, timeout=60).status_code == 200
    still_serving(url)


def test_half_sent_requests_are_closed_after_the_header_timeout(url) -> None:
    port = int(url.rsplit(":", 1)[1])
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(100)]
    try:
        for s in socks:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        for s in socks:
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(1024) == b""
        still_serving(url)
    finally:
        for s in socks:
            s.close()


def test_a_body_that_stops_arriving_is_408(url) -> None:
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n" + json.dumps({"model": "tiny"}).encode()[:-1])
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    still_serving(url)


@pytest.mark.parametrize("stop", [["a"] * 17, ["x" * 257]], ids=["17-stops", "long-stop"])
def test_too_many_or_too_long_stop_strings_are_400(url, stop) -> None:
    err = error_of(httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": "1", "stop": stop}, timeout=30), 400)
    assert err["param"] == "stop"

