"""Sampling through the Tinker API with the unmodified ``tinker`` SDK: the untrained base model
(``create_sampling_client(base_model=...)``), prompt logprobs, top-k prompt and sample logprobs,
``prompt_logprobs_last_n``, and the clear refusal of what the gateway does not serve.

The logprobs the sampler reports are checked against the training client's ``forward`` on the
same tokens (a different code path: the trainer's padded batch forward).
"""

from __future__ import annotations

import math
import os

import pytest

pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")
pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from tinker import types  # noqa: E402

from tinker_scheduler.tinker_api import serve  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
PROMPT = [1, 20, 21, 22, 30]
TOL = 1e-4  # float32 logprobs of the same model from two forward implementations


@pytest.fixture(scope="module")
def service(ray_session, tmp_path_factory):
    from tinker_scheduler import Scheduler
    from tinker_scheduler.testing import SLEEP_TRAIN

    tmp = tmp_path_factory.mktemp("tinker-sampling")
    scheduler = Scheduler(port=0, db=tmp / "s.db", runs_dir=tmp / "runs", runner=SLEEP_TRAIN, tick_s=0.05,
                          shutdown_timeout=30.0, paused=True, training_host_backend="local").start()
    key = "tml-" + scheduler.store.add_tenant("alice")
    gw = serve(scheduler)
    yield tinker.ServiceClient(base_url=gw.url, api_key=key)
    gw.stop()
    scheduler.stop()


@pytest.fixture(scope="module")
def base(service):
    return service.create_sampling_client(base_model="tiny").result()


def forward_logprobs(training, tokens: list[int]) -> list[float]:
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={"target_tokens": tokens[1:]})
    return training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()


def test_base_model_sampling_scores_and_samples_the_untrained_base(service, base) -> None:
    prompt = types.ModelInput.from_ints(PROMPT)
    out = base.sample(prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=3, seed=7),
                      include_prompt_logprobs=True).result()
    assert len(out.sequences) == 2 and all(1 <= len(s.tokens) <= 3 for s in out.sequences)
    # prompt logprobs: one per prompt token, None at position 0 (no context)
    assert len(out.prompt_logprobs) == len(PROMPT) and out.prompt_logprobs[0] is None
    # an untrained LoRA (B = 0) is the base model: its forward gives the same logprobs
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    assert out.prompt_logprobs[1:] == pytest.approx(forward_logprobs(training, PROMPT), abs=TOL)
    # after a large step the trained model differs, and the base sampler still samples the base
    datum = types.Datum(model_input=types.ModelInput.from_ints(PROMPT[:-1]), loss_fn_inputs={"target_tokens": PROMPT[1:]})
    training.forward_backward([datum], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=0.1)).result()
    trained = forward_logprobs(training, PROMPT)
    assert trained != pytest.approx(out.prompt_logprobs[1:], abs=1e-2)
    assert base.compute_logprobs(prompt).result() == pytest.approx(out.prompt_logprobs, abs=TOL, nan_ok=True)
    # the sampler of the trained weights agrees with the trained model's forward
    sampler = training.save_weights_and_get_sampling_client().result()
    assert sampler.compute_logprobs(prompt).result()[1:] == pytest.approx(trained, abs=TOL)
    # same seed, same samples
    again = base.sample(prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=3, seed=7)).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in out.sequences]


def test_topk_prompt_and_sample_logprobs_come_back_as_the_sdk_reads_them(base) -> None:
    prompt = types.ModelInput.from_ints(PROMPT)
    out = base.sample(prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=4, temperature=1.0),
                      include_prompt_logprobs=True, topk_prompt_logprobs=3, topk_sample_logprobs=2).result()
    topk = out.topk_prompt_logprobs
    assert len(topk) == len(PROMPT) and topk[0] is None
    for t, row in enumerate(topk[1:], start=1):
        assert len(row) == 3
        logprobs = [lp for _, lp in row]
        assert logprobs == sorted(logprobs, reverse=True) and all(lp <= 0 for lp in logprobs)
        assert out.prompt_logprobs[t] <= logprobs[0] + TOL  # the best token is at least as likely
        for token, lp in row:  # the actual token, when among the top 3, has its own logprob
            if token == PROMPT[t]:
                assert lp == pytest.approx(out.prompt_logprobs[t], abs=TOL)
        assert math.fsum(math.exp(lp) for lp in logprobs) <= 1 + TOL
    for s in out.sequences:
        assert len(s.topk_logprobs) == len(s.tokens)
        for token, lp, row in zip(s.tokens, s.logprobs, s.topk_logprobs, strict=True):
            assert len(row) == 2 and row[0][1] >= row[1][1]
            assert lp <= row[0][1] + TOL  # temperature 1: the sampled token's logprob is a raw logprob
            if token in (row[0][0], row[1][0]):
                assert lp == pytest.approx(dict(row)[token], abs=TOL)


def test_prompt_logprobs_last_n_scores_only_the_last_tokens(base) -> None:
    prompt = types.ModelInput.from_ints(PROMPT)
    full = base.compute_logprobs(prompt).result()
    last2 = base.compute_logprobs(prompt, prompt_logprobs_last_n=2).result()
    assert last2[:-2] == [None] * (len(PROMPT) - 2)
    assert last2[-2:] == pytest.approx(full[-2:], abs=TOL)
    out = base.sample(prompt, num_samples=1, sampling_params=types.SamplingParams(max_tokens=1),
                      include_prompt_logprobs=True, topk_prompt_logprobs=2, prompt_logprobs_last_n=1).result()
    assert out.topk_prompt_logprobs[:-1] == [None] * (len(PROMPT) - 1) and len(out.topk_prompt_logprobs[-1]) == 2


def test_what_sampling_does_not_serve_is_refused_clearly(base) -> None:
    prompt = types.ModelInput.from_ints(PROMPT)
    params = types.SamplingParams(max_tokens=1)
    with pytest.raises(tinker.BadRequestError, match="prompt_alt_tokens_k: is not supported"):
        base.sample(prompt, num_samples=1, sampling_params=params, prompt_alt_tokens_k=2).result()
    with pytest.raises(tinker.BadRequestError, match="topk_prompt_logprobs: must be in 0..20"):
        base.sample(prompt, num_samples=1, sampling_params=params, topk_prompt_logprobs=21).result()
