"""Tinker's ``stable_reinforce`` and ``gspo`` through the gateway, driven by the official SDK.

``stable_reinforce`` needs samples recorded with ``record_stability_info=True`` and provenance on
every datum (``Datum.with_provenance``, as tinker-cookbook's ``rl_loop`` builds it); the gateway
trains the sampled positions against the sampler logprobs it recorded, not the client's.
``gspo`` reads ``sequence_ratio_mask``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")
pytest.importorskip("tinker_serve", reason="the Tinker gateway needs tinker-scheduler's http extra (tinker-serve)")

from tinker import types  # noqa: E402

from tinker_scheduler.tinker_api import serve  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
PROMPT = [1, 20, 21, 22]


@pytest.fixture
def gateway(make_scheduler):
    scheduler = make_scheduler(paused=True, training_host_backend="local")
    keys = {name: "tml-" + scheduler.store.add_tenant(name) for name in ("alice", "bob")}
    gw = serve(scheduler)
    yield gw, keys
    gw.stop()


def rl_datum(seq: types.SampledSequence, client_logprobs: list[float] | None = None, *,
             provenance: bool = True, ratio_mask: bool = False) -> types.Datum:
    """The datum of tinker-cookbook's ``rl_loop``: prompt + sample, shifted by one."""
    sampled = list(seq.tokens)
    ob_len = len(PROMPT) - 1
    full = PROMPT + sampled
    inputs = {"target_tokens": full[1:],
              "logprobs": [0.0] * ob_len + (client_logprobs or list(seq.logprobs)),
              "advantages": [0.0] * ob_len + [1.0] * len(sampled)}
    if ratio_mask:
        inputs["sequence_ratio_mask"] = [0.0] * ob_len + [1.0] * len(sampled)
    datum = types.Datum(model_input=types.ModelInput.from_ints(full[:-1]), loss_fn_inputs=inputs)
    if not provenance:
        return datum
    sid = seq.sequence_id
    return datum.with_provenance(
        model_input=[types.PromptProvenanceSpan(sequence_id=sid, length=len(PROMPT)),
                     types.SampledProvenanceSpan(sequence_id=sid, length=len(sampled) - 1)],
        loss_fn_inputs=[types.PromptProvenanceSpan(sequence_id=sid, offset=1, length=len(PROMPT) - 1),
                        types.SampledProvenanceSpan(sequence_id=sid, length=len(sampled))])


def test_stable_reinforce_trains_on_recorded_samples_and_gspo_on_its_ratio_mask(gateway, monkeypatch) -> None:
    gw, keys = gateway
    service = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"])
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    # get_info's tokenizer_id is a directory the SDK's AutoTokenizer loads offline
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert training.get_tokenizer().decode(PROMPT[1:]) == "./0"  # the tiny preset's characters 20-22
    sampler = training.save_weights_and_get_sampling_client(record_stability_info=True).result()
    params = types.SamplingParams(max_tokens=4, temperature=1.0)
    seqs = sampler.sample(types.ModelInput.from_ints(PROMPT), num_samples=2, sampling_params=params).result().sequences
    seq = seqs[0]
    assert seq.sequence_id and seqs[1].sequence_id != seq.sequence_id

    # the recorded sampler logprobs are used: garbage client logprobs would put every ratio far
    # outside the band (e^40), yet no token is dropped (same weights: ratio 1)
    garbage = [-40.0] * len(seq.tokens)
    out = training.forward_backward([rl_datum(s, garbage) for s in seqs], "stable_reinforce").result()
    assert "loss:sum" in out.metrics
    assert out.metrics["stable_reinforce/maskfrac:mean"] == pytest.approx(0.0)
    # ... which importance_sampling, taking the client's logprobs as they are, cannot tell
    naive = training.forward_backward([rl_datum(seq, garbage, provenance=False)], "importance_sampling").result()
    assert naive.metrics["importance_sampling/ratio_mean:mean"] > 1e6
    out = training.forward_backward([rl_datum(seq)], "stable_reinforce", {"kl_coeff": 0.1}).result()
    assert "loss:sum" in out.metrics
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()

    # no provenance, tokens that are not the sample's, another tenant's sequence: refused (the
    # SDK raises a future's INVALID_ARGUMENT as RequestFailedError)
    with pytest.raises(tinker.RequestFailedError, match="record_stability_info"):
        training.forward_backward([rl_datum(seq, provenance=False)], "stable_reinforce").result()
    lie = rl_datum(seq)
    lie.loss_fn_inputs["target_tokens"] = types.TensorData.from_numpy(
        np.asarray(PROMPT[1:] + [(t + 1) % 50 for t in seq.tokens]))
    with pytest.raises(tinker.RequestFailedError, match="are not sampled tokens"):
        training.forward_backward([lie], "stable_reinforce").result()
    bob = tinker.ServiceClient(base_url=gw.url, api_key=keys["bob"]).create_lora_training_client(
        base_model="tiny", rank=4).result()
    with pytest.raises(tinker.RequestFailedError, match="not recorded"):
        bob.forward_backward([rl_datum(seq)], "stable_reinforce").result()

    # gspo: the sequence ratio over sequence_ratio_mask, Tinker's clip thresholds by default
    out = training.forward_backward([rl_datum(s, provenance=False, ratio_mask=True) for s in seqs], "gspo").result()
    assert out.metrics["gspo/seq_ratio_mean:mean"] == pytest.approx(1.0, abs=0.2)
    out = training.forward_backward([rl_datum(seq, provenance=False, ratio_mask=True)], "gspo",
                                    {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}).result()
    assert "loss:sum" in out.metrics
