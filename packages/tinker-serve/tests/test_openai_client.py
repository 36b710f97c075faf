"""The official ``openai`` client against ``opentinker serve`` on a real uvicorn server: completions,
chat, streaming, two adapters at once, a trained adapter that answers in the format its training taught,
and a streaming client that hangs up mid-answer (its generation stops, its rows are freed)."""

from __future__ import annotations

import concurrent.futures

import httpx
import openai
import pytest
import torch

from tinker_env_math.arithmetic import arithmetic_problems, score_answer
from tinker_serve.app import create_app
from tinker_serve.served import ServedModels

KEY = "sk-openai-client"


@pytest.fixture(scope="module")
def noise_adapter(tiny_dir, tmp_path_factory):
    """A PEFT adapter directory with random (nonzero) weights: a second adapter that changes answers."""
    from tinker_algos.model.models import PolicyModel

    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    policy.add_adapter("noise", seed=3)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in policy.adapter_parameters("noise"):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    out = tmp_path_factory.mktemp("adapters") / "noise"
    policy.model.save_pretrained(str(out), selected_adapters=["noise"])
    return out / "noise" if (out / "noise" / "adapter_config.json").is_file() else out


@pytest.fixture(scope="module")
def server(tiny_dir, arithmetic_run, noise_adapter, helpers):
    from tinker_algos.model.models import PolicyModel

    served = ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "tiny", max_batch=16)
    served.load_adapter("sums", arithmetic_run)
    served.load_adapter("noise", noise_adapter)
    with helpers.live_server(create_app(served, api_key=KEY)) as url:
        yield url, served


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key=KEY, max_retries=0)


def test_models_completions_and_chat(client):
    assert sorted(m.id for m in client.models.list()) == ["noise", "sums", "tiny"]
    r = client.completions.create(model="tiny", prompt="1+1=", max_tokens=5, temperature=0, logprobs=2)
    assert r.object == "text_completion" and r.usage.completion_tokens >= 1
    assert len(r.choices[0].logprobs.tokens) == r.usage.completion_tokens
    chat = client.chat.completions.create(model="sums", messages=[{"role": "user", "content": "2+3="}], max_tokens=4, temperature=0)
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].finish_reason in ("stop", "length")
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens


def test_streaming_gives_the_same_text(client):
    whole = client.chat.completions.create(model="noise", messages=[{"role": "user", "content": "hi"}], max_tokens=12, temperature=0)
    stream = client.chat.completions.create(model="noise", messages=[{"role": "user", "content": "hi"}], max_tokens=12, temperature=0, stream=True)
    chunks = list(stream)
    assert len(chunks) >= 3
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    completion = "".join(c.choices[0].text for c in client.completions.create(model="tiny", prompt="5+", max_tokens=8, temperature=0, stream=True))
    assert completion == answer_text(client, "tiny", "5+", 8)


def answer_text(client, model: str, prompt: str, n: int) -> str:
    return client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0).choices[0].text


def test_two_adapters_and_the_base_answer_concurrently_as_each_does_alone(client, server):
    prompts = ["3+4=", "8+1=", "hello"]
    alone = {(m, p): answer_text(client, m, p, 8) for m in ("tiny", "sums", "noise") for p in prompts}
    assert len({alone[(m, "hello")] for m in ("tiny", "sums", "noise")}) == 3, alone
    engine = server[1].engine
    before = engine.largest_batch
    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        futures = {key: pool.submit(answer_text, client, key[0], key[1], 8) for key in alone}
        together = {key: f.result() for key, f in futures.items()}
    assert together == alone
    assert engine.largest_batch >= max(before, 2)


def test_the_trained_adapter_answers_held_out_sums_in_the_trained_format_and_the_base_does_not(client, helpers):
    """Twenty SFT steps on one-digit sums teach the tiny model the answer format (a number, then a
    newline; ``score_answer``'s format reward), not yet the sums: the base never states a number."""
    problems = arithmetic_problems(10, 0, **helpers.arithmetic, split="test")
    replies = {m: [client.completions.create(model=m, prompt=p.prompt, max_tokens=4, temperature=0, stop=["\n"]).choices[0]
                   for p in problems] for m in ("tiny", "sums")}
    scores = {m: [score_answer(c.text, p.answer, format_reward=0.5) for c, p in zip(replies[m], problems, strict=True)] for m in replies}
    assert all(s >= 0.5 for s in scores["sums"]) and all(c.finish_reason == "stop" for c in replies["sums"]), replies["sums"]
    assert not any(scores["tiny"]), replies["tiny"]


def test_wrong_key_and_unknown_model_raise_the_clients_errors(server, client):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server[0] + "/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="nope", prompt="x")
    assert info.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], temperature=5)


def test_a_client_that_hangs_up_mid_stream_stops_its_generation(server, helpers):
    url, served = server
    engine = served.engine
    helpers.wait_until(lambda: engine.active_rows == 0, "an idle engine")
    got, steps = 0, engine.decode_steps
    body = {"model": "tiny", "prompt": "1", "max_tokens": 900, "temperature": 1.0, "stream": True, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http, http.stream("POST", "/v1/completions", json=body) as r:
        for line in r.iter_lines():
            got += line.startswith("data: {")
            if got == 3:
                assert engine.active_rows == 1
                break  # leaving the block closes the connection mid-stream
    helpers.wait_until(lambda: engine.active_rows == 0, "the engine to drop the abandoned request")
    assert engine.decode_steps - steps < 900 and engine.waiting == 0


def test_a_client_that_gives_up_on_a_whole_answer_stops_its_generation(server, helpers):
    url, served = server
    engine = served.engine
    helpers.wait_until(lambda: engine.active_rows == 0, "an idle engine")
    steps = engine.decode_steps
    body = {"model": "tiny", "prompt": "1", "max_tokens": 1000, "temperature": 1.0, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):  # the client hangs up after 0.5 s without an answer
        httpx.post(f"{url}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=0.5)
    helpers.wait_until(lambda: engine.active_rows == 0, "the engine to drop the abandoned request")
    assert engine.decode_steps - steps < 1000
