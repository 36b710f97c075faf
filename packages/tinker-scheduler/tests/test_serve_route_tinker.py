"""The serve route with the Tinker gateway: sampler weights saved through the official ``tinker``
SDK are a model name (``tinker://<model_id>/sampler_weights/<name>``) of the OpenAI route, for their
owner only, and answer as the gateway's own sampler does."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")
openai = pytest.importorskip("openai")
pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from tinker import types  # noqa: E402

from tinker_scheduler import serve_route  # noqa: E402
from tinker_scheduler.tinker_api import serve  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
SEQ = [1, 20, 21, 22, 30, 31, 2]


def test_tinker_sampler_weights_are_served_to_their_owner(make_scheduler) -> None:
    scheduler = make_scheduler(paused=True, training_host_backend="local")
    keys = {name: scheduler.store.add_tenant(name) for name in ("alice", "bob")}
    gw = serve(scheduler)
    route = serve_route.serve(scheduler, tinker=gw.models)
    try:
        training = tinker.ServiceClient(base_url=gw.url, api_key="tml-" + keys["alice"]).create_lora_training_client(base_model="tiny", rank=4).result()
        datum = types.Datum(model_input=types.ModelInput.from_ints(SEQ[:-1]),
                            loss_fn_inputs={"target_tokens": SEQ[1:], "weights": [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]})
        for _ in range(3):
            training.forward_backward([datum], "cross_entropy").result()
            training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        path = training.save_weights_for_sampler("w1").result().path
        sampler = training.create_sampling_client(path)
        greedy = sampler.sample(types.ModelInput.from_ints(SEQ[:3]), num_samples=1,
                                sampling_params=types.SamplingParams(max_tokens=4, temperature=0.0)).result()

        alice = openai.OpenAI(base_url=f"{route.url}/v1", api_key=keys["alice"], max_retries=0)
        r = alice.completions.create(model=path, prompt=SEQ[:3], max_tokens=4, temperature=0, logprobs=0)
        assert r.model == path and r.usage.prompt_tokens == 3
        expected = greedy.sequences[0].tokens
        served = route.app.state.backend.lookup("alice", path)
        assert r.choices[0].text == served.policy.tokenizer.decode(expected, skip_special_tokens=True)

        bob = openai.OpenAI(base_url=f"{route.url}/v1", api_key=keys["bob"], max_retries=0)
        with pytest.raises(openai.NotFoundError):
            bob.completions.create(model=path, prompt="x", max_tokens=2)
    finally:
        route.stop()
        gw.stop()
