"""The stand-in vLLM server for the tests, and fixtures: a tiny model, a learner with a LoRA
adapter, the stand-in serving its own copy of the model.

The stand-in speaks the routes the vllm engine uses, answered by a real tiny model (tinker-algos'
sampler, behind its hf engine), and has switches that reproduce known pitfalls.

Routes: ``GET /v1/models``, ``POST /v1/completions`` (token prompts, ``n``, ``seed``, ``logprobs``,
``return_tokens_as_token_ids``, ``echo``), ``POST /v1/load_lora_adapter`` (400 for a name held, as
vLLM), ``POST /v1/unload_lora_adapter``, ``POST /pause?mode=``, ``POST /resume``.

Pitfalls (``StandIn.pitfalls``):

* ``stale_cache`` -- prompt logprobs are cached by prompt tokens alone, not by adapter (a prefix
  cache reused across adapters, vllm#42125): after a new version loads, the probe is answered with
  the previous version's logprobs;
* ``zero_effect`` -- ``load_lora_adapter`` answers 200 but the adapter is never applied (module
  names that match nothing, vllm#34186): requests naming it run on the base model;
* ``drop_on_pause`` -- ``/pause`` releases every adapter (sleep mode unmapping LoRA buffers,
  verl#7434).

Test-only: it imports tinker-algos, torch and FastAPI, which the engine package does not.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import uvicorn
from fastapi import FastAPI, HTTPException, Request

from tinker_algos.model.models import PolicyModel, sequence_logprobs
from tinker_algos.sampling.engine import HFEngine
from tinker_algos.sampling.sampler import SamplingParams

torch.set_num_threads(1)


class StandIn:
    """The server's state: one policy, the adapters loaded by name, the pitfalls switched on."""

    def __init__(self, policy: PolicyModel, base_name: str = "tiny") -> None:
        self.policy = policy
        self.base_name = base_name
        self.engine = HFEngine(policy)
        self.adapters: dict[str, str | None] = {}  # name -> the policy adapter it runs (None: the base model)
        self.paths: dict[str, str] = {}
        self.pitfalls: set[str] = set()
        self.lock = threading.Lock()
        self.prompt_cache: dict[tuple[Any, ...], list[float]] = {}
        self.loads: list[str] = []

    def model_of(self, name: str) -> str | None:
        if name == self.base_name:
            return None
        if name not in self.adapters:
            raise HTTPException(404, f"The model `{name}` does not exist.")
        return self.adapters[name]

    def load(self, name: str, path: str) -> None:
        with self.lock:
            if name in self.adapters:
                raise HTTPException(400, f"The lora adapter '{name}' has already been loaded.")
            if "zero_effect" in self.pitfalls:
                self.adapters[name] = None
            else:
                active = self.policy.active_adapter if self.policy.is_peft else None
                self.policy.load_adapter(name, path)  # peft makes it active: requests in flight keep theirs
                if active is not None:
                    self.policy.set_adapter(active)
                self.adapters[name] = name
            self.paths[name] = path
            self.loads.append(name)

    def unload(self, name: str) -> None:
        with self.lock:
            if name not in self.adapters:
                raise HTTPException(404, f"The lora adapter '{name}' cannot be found.")
            if self.adapters.pop(name) is not None:
                self.policy.remove_adapter(name)
            self.paths.pop(name, None)

    def running(self, adapter: str | None) -> Any:
        """``adapter`` active, or every adapter off (None: the base model)."""
        if adapter is None:
            return self.policy.adapters_disabled() if self.policy.is_peft else contextlib.nullcontext()
        return self.policy.using_adapter(adapter)

    def drop_all(self) -> None:
        for name in list(self.adapters):
            self.unload(name)

    def score(self, adapter: str | None, rows: list[list[int]]) -> list[list[float]]:
        """Each row's prompt logprobs (None first, as vLLM's echo), cached per prompt with stale_cache."""
        out = []
        for row in rows:
            key: tuple[Any, ...] = tuple(row) if "stale_cache" in self.pitfalls else (adapter, *row)
            if key not in self.prompt_cache:
                with self.lock, torch.no_grad(), self.running(adapter):
                    t = torch.tensor([row])
                    lp = sequence_logprobs(self.policy.module, t, torch.ones_like(t))[0].tolist()
                self.prompt_cache[key] = lp
            out.append(self.prompt_cache[key])
        return out


def build_app(state: StandIn) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        data = [{"id": state.base_name, "object": "model", "root": state.base_name, "parent": None}]
        data += [{"id": n, "object": "model", "root": state.paths.get(n), "parent": state.base_name} for n in list(state.adapters)]
        return {"object": "list", "data": data}

    @app.post("/v1/load_lora_adapter")
    def load(body: dict[str, Any]) -> dict[str, str]:
        state.load(body["lora_name"], body["lora_path"])
        return {"status": "ok"}

    @app.post("/v1/unload_lora_adapter")
    def unload(body: dict[str, Any]) -> dict[str, str]:
        state.unload(body["lora_name"])
        return {"status": "ok"}

    @app.post("/pause")
    def pause(request: Request) -> dict[str, str]:
        mode = request.query_params.get("mode", "abort")
        state.engine.pause(mode)  # type: ignore[arg-type]
        if "drop_on_pause" in state.pitfalls:
            state.drop_all()
        return {"status": "paused"}

    @app.post("/resume")
    def resume() -> dict[str, str]:
        state.engine.resume()
        return {"status": "resumed"}

    @app.post("/v1/completions")
    def completions(body: dict[str, Any]) -> dict[str, Any]:
        adapter = state.model_of(body["model"])
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        if body.get("echo"):
            choices = []
            for i, lps in enumerate(state.score(adapter, prompts)):
                choices.append({"index": i, "text": "", "finish_reason": "length", "stop_reason": None,
                                "logprobs": {"tokens": [f"token_id:{t}" for t in prompts[i]], "token_logprobs": [None, *lps[1:]]}})
            return {"object": "text_completion", "model": body["model"], "choices": choices}
        stop_ids = list(body.get("stop_token_ids") or [])
        params = SamplingParams(
            max_new_tokens=int(body["max_tokens"]), temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)), top_k=max(0, int(body.get("top_k", -1))), n=int(body.get("n", 1)),
            stop=tuple(body.get("stop") or ()), stop_token_ids=tuple(stop_ids),
            stop_at_eos=not body.get("ignore_eos", False), seed=body.get("seed"),
        )
        with state.running(adapter):
            out = state.engine.generate(prompts, params, adapter=adapter)
        choices = []
        for pi, samples in enumerate(out):
            for si, s in enumerate(samples):
                finish, stop = {"length": ("length", None), "abort": ("abort", None), "eos": ("stop", None),
                                "stop_string": ("stop", next((x for x in params.stop if x in s.text), None))}.get(
                                    s.stop_reason, ("stop", s.tokens[-1]))
                choices.append({"index": pi * params.n + si, "text": s.text, "finish_reason": finish, "stop_reason": stop,
                                "logprobs": {"tokens": [f"token_id:{t}" for t in s.tokens], "token_logprobs": s.raw_logprobs}})
        return {"object": "text_completion", "model": body["model"], "choices": choices}

    return app


@contextmanager
def serving(state: StandIn):
    """The stand-in on a free localhost port, in a thread; yields its base URL."""
    from tinker_core.http_limits import serve_in_thread

    server = uvicorn.Server(uvicorn.Config(build_app(state), host="127.0.0.1", port=0, log_level="warning"))
    with serve_in_thread(server, "test-vllm-stand-in", "the vLLM stand-in") as port:
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            state.engine.resume()  # a paused engine would hold the server's shutdown


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tinker_algos.model.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture
def learner(tiny_dir: Path):
    """The job's policy with its LoRA adapter ``policy`` (as a LoRA job's trainer holds it)."""
    from tinker_algos.model.models import LoraSpec, PolicyModel

    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    policy.add_adapter("policy", LoraSpec(rank=4, alpha=8, dropout=0.0), seed=0)
    return policy


@pytest.fixture
def standin(tiny_dir: Path) -> Iterator[tuple[StandIn, str]]:
    """The stand-in server over its own copy of the tiny model: ``(state, url)``."""
    from tinker_algos.model.models import PolicyModel

    state = StandIn(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"))
    with serving(state) as url:
        yield state, url
