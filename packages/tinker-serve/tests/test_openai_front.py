"""The ``openai`` HTTP front (tinker_serve.directory) that the scheduler mounts: registered through
tinker-serve's entry point, serving the models a ModelDirectory names -- one engine per base,
adapters loaded on first use, the least recently used dropped past MAX_ADAPTERS."""

from __future__ import annotations

from importlib import metadata

import pytest
from fastapi.testclient import TestClient

import tinker_core.registry
from tinker_core.http_fronts import APIError, ModelRef
from tinker_serve import directory, plugin
from tinker_serve.app import create_app
from tinker_serve.served import ServedModels

KEY = "sk-front"


class TwoModels:
    """A ModelDirectory: callers send KEY; they see the base model (named by its path) and ``sums``
    (the base with the arithmetic adapter), and ``sums-2`` (the same adapter under another name)."""

    def __init__(self, base: str, adapter: str) -> None:
        self.base = base
        self.refs = {base: ModelRef(base, base), "sums": ModelRef("sums", base, adapter=adapter),
                     "sums-2": ModelRef("sums-2", base, adapter=adapter)}

    def caller(self, headers):
        if headers.get("authorization") != f"Bearer {KEY}":
            raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
        return "me"

    def list_models(self, caller):
        return [{"id": n, "object": "model", "created": 0, "owned_by": caller, "root": r.base, "parent": None}
                for n, r in self.refs.items()]

    def resolve(self, caller, name):
        if name not in self.refs:
            raise APIError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")
        return self.refs[name]


def complete(client: TestClient, model: str, key: str = KEY):
    return client.post("/v1/completions", json={"model": model, "prompt": "3+4=", "max_tokens": 4, "temperature": 0},
                       headers={"Authorization": f"Bearer {key}"})


def test_the_openai_front_is_registered_through_tinker_serves_entry_point():
    entry = next(e for e in metadata.entry_points(group="opentinker") if e.name == "serve")
    assert entry.load() is plugin
    tinker_core.registry.reset_plugins()
    front = tinker_core.registry.get_http_front("openai")
    assert front.distribution == "tinker-serve" and front.obj is plugin.openai_front


def test_the_front_serves_the_directorys_models_as_opentinker_serve_does(tiny_dir, arithmetic_run):
    app = plugin.openai_front(TwoModels(str(tiny_dir), str(arithmetic_run)), device="cpu")
    with TestClient(app) as client:
        listed = client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()["data"]
        assert [m["id"] for m in listed] == [str(tiny_dir), "sums", "sums-2"]
        assert complete(client, "sums", key="wrong").status_code == 401
        missing = complete(client, "nope")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
        answers = {name: complete(client, name).json() for name in (str(tiny_dir), "sums")}
        assert all("choices" in a for a in answers.values()), answers
        got = {name: a["choices"][0]["text"] for name, a in answers.items()}
        refused = client.post("/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": str(arithmetic_run)},
                              headers={"Authorization": f"Bearer {KEY}"})
        assert refused.status_code == 404
    # the oracle: `opentinker serve` over the same base and adapter answers the same greedy text
    served = ServedModels.load(str(tiny_dir), device="cpu")
    served.load_adapter("sums", arithmetic_run)
    with TestClient(create_app(served)) as local:
        want = {name: complete(local, name).json()["choices"][0]["text"] for name in (str(tiny_dir), "sums")}
    assert got == want


def test_past_max_adapters_the_least_recently_used_adapter_is_unloaded(tiny_dir, arithmetic_run, monkeypatch):
    monkeypatch.setattr(directory, "MAX_ADAPTERS", 1)
    backend = directory.DirectoryBackend(TwoModels(str(tiny_dir), str(arithmetic_run)), device="cpu")
    served = backend.lookup("me", "sums")
    base = str(tiny_dir)
    assert set(served.models) == {base, "sums"} and len(backend.engines()) == 1
    assert backend.lookup("me", "sums-2") is served  # one engine per base model
    assert set(served.models) == {base, "sums-2"}
    assert backend.lookup("me", base) is served and set(served.models) == {base, "sums-2"}


def test_a_model_without_an_adapter_is_its_base():
    with pytest.raises(ValueError, match="name must be the base"):
        ModelRef("mine", "tiny")


def test_a_base_model_that_cannot_load_is_a_503_naming_it(tmp_path):
    missing = str(tmp_path / "no-such-model")
    backend = directory.DirectoryBackend(TwoModels(missing, str(tmp_path)), device="cpu")
    with pytest.raises(APIError) as e:
        backend.lookup("me", missing)
    assert e.value.status == 503 and "no-such-model" in e.value.message and e.value.code == "model_load_failed"
