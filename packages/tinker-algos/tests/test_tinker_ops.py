"""tinker_ops: Tinker's data alignment, loss keys, Adam and sampling fields on tinker_algos."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tinker_algos import tinker_ops
from tinker_algos.tinker_ops import (
    ADAM_DEFAULTS,
    TINKER_CLIP_HIGH,
    TINKER_CLIP_LOW,
    adam_step_args,
    datum_batch,
    evaluate_loss,
    loss_config,
    per_datum_logprobs,
    per_position,
    sampled_sequences,
    sampling_params,
    sequence_batch,
    sequence_logprobs,
    tokenizer_files,
)

pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")


def datum(seq: list[int], weights: list[float] | None = None, **fields: list[float]) -> dict:
    d = {"tokens": seq[:-1], "target_tokens": seq[1:], **fields}
    if weights is not None:
        d["loss_weights"] = weights
    return d


def test_datum_batch_puts_the_last_target_at_the_end_and_shifts_per_position_fields_by_one():
    data = [datum([1, 5, 6, 7], [0, 1, 1], advantages=[0, 2, 3]), datum([1, 9, 2])]
    batch, extra = datum_batch(data, "importance_sampling", pad_token_id=0)
    np.testing.assert_array_equal(batch.tokens_B_T, [[1, 5, 6, 7], [1, 9, 2, 0]])
    np.testing.assert_array_equal(batch.attention_mask_B_T, [[1, 1, 1, 1], [1, 1, 1, 0]])
    # position t of a datum predicts target t = token t + 1 of the batch row
    np.testing.assert_array_equal(batch.loss_mask_B_T, [[0, 0, 1, 1], [0, 1, 1, 0]])  # absent weights: 1
    np.testing.assert_array_equal(batch.advantages_B_T, [[0, 0, 2, 3], [0, 0, 0, 0]])  # absent: 0
    assert extra == {}


def test_cross_entropy_gets_unit_weights_on_the_mask():
    batch, extra = datum_batch([datum([1, 5, 6, 7], [0, 0.5, 2])], "cross_entropy", pad_token_id=0)
    np.testing.assert_array_equal(extra["weights_B_T"], [[0, 0, 1, 1]])
    np.testing.assert_array_equal(batch.loss_mask_B_T, [[0, 0, 0.5, 2]])


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ([], "data: is empty"),
        ([{"tokens": [], "target_tokens": []}], "data[0].tokens"),
        ([{"tokens": [1, 2], "target_tokens": [2]}], "data[0].target_tokens: has 1 entries for 2 tokens"),
        ([{"tokens": [1, 2, 3], "target_tokens": [5, 3, 4]}], "data[0].target_tokens[0] = 5 but tokens[1] = 2"),
        ([datum([1, 2, 3], [1.0])], "data[0].loss_weights: has 1 entries for 2 tokens"),
    ],
)
def test_bad_data_names_the_field(data, named):
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        datum_batch(data, "cross_entropy", pad_token_id=0)


def test_per_position_defaults_when_absent():
    np.testing.assert_array_equal(per_position({}, 0, 3, "advantages", 0.0), [0, 0, 0])
    np.testing.assert_array_equal(per_position({"x": [1, 2]}, 0, 2, "x", 9.0), [1, 2])


def test_logprobs_come_back_in_tinker_alignment():
    lp_B_T = np.array([[9, -1, -2, -3], [9, -4, -5, 0]], dtype=np.float32)
    assert per_datum_logprobs(lp_B_T, [3, 2]) == [[-1, -2, -3], [-4, -5]]
    batch = sequence_batch([[1, 2, 3], [4]], pad_token_id=0)
    np.testing.assert_array_equal(batch.tokens_B_T, [[1, 2, 3], [4, 0, 0]])
    assert sequence_logprobs(lp_B_T, [[1, 2, 3], [4]]) == [[-1, -2], []]
    with pytest.raises(ValueError, match="sequences"):
        sequence_batch([[]], pad_token_id=0)


def test_ppo_gets_tinkers_clip_defaults_and_threshold_keys():
    assert loss_config("ppo", {}) == pytest.approx(
        {"eps_low": 1 - TINKER_CLIP_LOW, "eps_high": TINKER_CLIP_HIGH - 1, "dual_clip": None}
    )
    assert loss_config("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}) == pytest.approx(
        {"eps_low": 0.1, "eps_high": 0.1, "dual_clip": None}
    )
    assert loss_config("ppo", {"eps_low": 0.3, "dual_clip": 0.0}) == {"eps_low": 0.3, "dual_clip": None}
    # CISPO's Tinker default is one-sided: clip_low_threshold = 0, clip_high_threshold = 4
    assert loss_config("cispo", {}) == pytest.approx({"eps_low": 1.0, "eps_high": 3.0})
    assert loss_config("cispo", {"clip_high_threshold": 1.5}) == pytest.approx({"eps_low": 1.0, "eps_high": 0.5})
    assert loss_config("dro", {"beta": 0.1}) == {"beta": 0.1}
    assert loss_config("cross_entropy", {}) == {}
    for bad in ({"clip_low_threshold": 1.5}, {"clip_high_threshold": 0.5}, {"clip_low_threshold": float("nan")}):
        with pytest.raises(ValueError, match="loss_fn_config.clip_"):
            loss_config("ppo", bad)


def test_an_unknown_loss_is_named_with_a_suggestion():
    with pytest.raises(ValueError, match="loss_fn: .*importance_sampling"):
        loss_config("importance_samplin", {})


def test_evaluate_loss_sums_cross_entropy_over_the_weighted_targets():
    data = [datum([1, 5, 6, 7], [0, 1, 1])]
    batch, extra = datum_batch(data, "cross_entropy", pad_token_id=0)
    lp_B_T = np.array([[0, -1, -2, -4]], dtype=np.float32)
    metrics = evaluate_loss(lp_B_T, batch, extra, "cross_entropy", {})
    assert metrics["loss"] == pytest.approx(6.0) and metrics["loss:sum"] == metrics["loss"]
    assert metrics["num_tokens"] == 2
    with pytest.raises(ValueError, match="loss 'cross_entropy'"):
        evaluate_loss(lp_B_T, batch, extra, "cross_entropy", {"nonsense": 1.0})


def test_adam_fields_default_like_tinker_and_are_checked():
    kwargs, clip = adam_step_args({"learning_rate": 1e-3})
    assert kwargs == {"lr": 1e-3, "betas": (ADAM_DEFAULTS["beta1"], ADAM_DEFAULTS["beta2"]),
                      "eps": ADAM_DEFAULTS["eps"], "weight_decay": 0.0}
    assert clip is None
    assert adam_step_args({"learning_rate": 1e-3, "grad_clip_norm": 1.0})[1] == 1.0
    with pytest.raises(ValueError, match="adam.learning_rate"):
        adam_step_args({})
    with pytest.raises(ValueError, match="adam.beta2"):
        adam_step_args({"learning_rate": 1.0, "beta2": 1.5})


def test_sampling_params_speak_tinkers_names():
    sp = sampling_params({"max_tokens": 5, "temperature": 0.5, "stop": ["\n"], "seed": 3}, num_samples=0)
    assert (sp.max_new_tokens, sp.temperature, sp.n, sp.stop, sp.seed) == (5, 0.5, 1, ["\n"], 3)
    with pytest.raises(ValueError, match=r"sampling_params: max_tokens"):
        sampling_params({"max_tokens": 0}, num_samples=1)


def test_stop_reasons_map_onto_tinkers_three():
    rows = [[SimpleNamespace(tokens=[1], logprobs=[-0.5], stop_reason=r) for r in ("length", "eos", "stop_id", "stop_string")]]
    assert [s["stop_reason"] for s in sampled_sequences(rows)[0]] == ["length", "stop_token", "stop_token", "stop_string"]
    assert set(tinker_ops.STOP_REASONS.values()) == {"length", "stop_token", "stop_string"}


def test_tokenizer_files_are_the_saved_files_as_bytes(policy):
    files = tokenizer_files(policy.tokenizer)
    assert files and all(a.dtype == np.uint8 for a in files.values())
    assert any(name.startswith("tokenizer") for name in files)



def test_context_length_reads_the_models_config():
    assert tinker_ops.context_length(SimpleNamespace(max_position_embeddings=1024)) == 1024
    assert tinker_ops.context_length(SimpleNamespace(n_positions=512)) == 512  # GPT-2 style
    assert tinker_ops.context_length(SimpleNamespace()) is None


LIMITS = tinker_ops.RequestLimits(max_data=4, max_tokens=100, max_new_tokens=20)


@pytest.mark.parametrize(
    ("check", "named"),
    [
        # a datum's model input is its tokens plus the last target
        (lambda: tinker_ops.check_data([10, 64], 64, LIMITS),
         "data[1]: tokens plus the last target of 65 tokens exceeds the model's context length of 64 tokens"),
        (lambda: tinker_ops.check_data([1] * 5, 64, LIMITS), "data: 5 data in one request, over the limit of 4"),
        (lambda: tinker_ops.check_data([40, 40, 40], 64, LIMITS), "data: 123 tokens in one request, over the limit of 100"),
        (lambda: tinker_ops.check_sequences([10, 65], 64, LIMITS),
         "sequences[1]: a sequence of 65 tokens exceeds the model's context length of 64 tokens"),
        (lambda: tinker_ops.check_sequences([1] * 5, None, LIMITS), "sequences: 5 sequences in one request, over the limit of 4"),
        (lambda: tinker_ops.check_sample([10], 21, 1, 64, LIMITS), "sampling_params.max_tokens: 21 is over the limit of 20"),
        (lambda: tinker_ops.check_sample([50], 20, 1, 64, LIMITS),
         "prompts[0]: 50 prompt tokens + sampling_params.max_tokens=20 exceed the model's context length of 64 tokens"),
        (lambda: tinker_ops.check_sample([1, 1], 1, 3, 64, LIMITS), "num_samples: 2 prompt(s) x 3 samples = 6 sequences, over the limit of 4"),
        (lambda: tinker_ops.check_sample([31], 20, 2, 64, LIMITS), "prompts: 102 tokens to sample in one request"),
    ],
)
def test_request_checks_name_the_limit(check, named):
    with pytest.raises(ValueError) as info:
        check()
    assert str(info.value).startswith(named), str(info.value)
    assert "\n" not in str(info.value)


def test_requests_at_the_limits_pass_and_without_limits_only_the_context_counts():
    tinker_ops.check_data([63, 35], 64, LIMITS)  # 64 + 36 = 100 tokens: exactly the limits
    tinker_ops.check_sequences([64, 36], 64, LIMITS)
    tinker_ops.check_sample([30], 20, 2, 64, LIMITS)  # (30 + 20) x 2 = 100
    tinker_ops.check_data([63] * 50, 64)  # no limits: only the context length
    tinker_ops.check_sample([1000], 10_000, 100, None)  # no context length known, no limits
    with pytest.raises(ValueError, match="context length of 64"):
        tinker_ops.check_data([64], 64)


# ---- Tinker's documented loss formulas, by hand on small numbers --------------------------------
# One datum of 3 targets; lp = the learner's logprobs of the targets, q = the sampler's ("logprobs"),
# A = the advantages. Tinker sums every loss over the targets (loss:sum).
LP, Q, ADV = [-0.2, -1.0, -0.5], [-0.4, -0.7, -0.5], [2.0, -1.0, 0.5]


def tinker_step(loss_fn: str, config: dict) -> tuple[float, list[float]]:
    """(loss:sum, d loss / d lp) of the registered loss as the gateway runs it on LP, Q, ADV."""
    import torch

    import tinker_core.registry
    from tinker_core.contracts import LossInputs

    data = [datum([1, 5, 6, 7], advantages=ADV, sampling_logprobs=Q)]
    batch, extra = datum_batch(data, loss_fn, pad_token_id=0)
    cfg = loss_config(loss_fn, config)
    lp_B_T = np.zeros((1, 4))
    lp_B_T[0, 1:] = LP
    total = evaluate_loss(lp_B_T.astype(np.float32), batch, extra, loss_fn, cfg)["loss:sum"]
    lp = torch.tensor(lp_B_T, dtype=torch.float64, requires_grad=True)
    mask = torch.as_tensor(batch.loss_mask_B_T, dtype=torch.float64)
    out = tinker_core.registry.get_loss(loss_fn).obj(LossInputs(
        logprobs_B_T=lp, mask_B_T=mask, sampling_logprobs_B_T=torch.as_tensor(batch.sampler_logprobs_B_T, dtype=torch.float64),
        advantages_B_T=torch.as_tensor(batch.advantages_B_T, dtype=torch.float64),
        **{k: torch.as_tensor(v, dtype=torch.float64) for k, v in extra.items()}), **cfg)
    (out.loss_B_T * mask).sum().backward()
    return total, lp.grad[0, 1:].tolist()


def test_dro_is_tinkers_quadratic_penalty_formula():
    # loss = -sum(lp * A - beta/2 * (lp - q)^2); delta = lp - q = [0.2, -0.3, 0]
    beta = 0.05
    expected = -((-0.2 * 2.0 - 0.025 * 0.04) + (-1.0 * -1.0 - 0.025 * 0.09) + (-0.5 * 0.5))
    loss, grad = tinker_step("dro", {"beta": beta})
    assert loss == pytest.approx(expected, abs=1e-6)  # -0.34675
    assert grad == pytest.approx([-(2.0 - beta * 0.2), -(-1.0 + beta * 0.3), -0.5])  # -(A - beta * delta)
    assert tinker_step("dro", {})[0] == pytest.approx(expected, abs=1e-6)  # beta = 0.05 by default
    assert tinker_step("dro", {"beta": 1.0})[0] == pytest.approx(-(-0.4 - 0.02 + 1.0 - 0.045 - 0.25), abs=1e-6)


def test_importance_sampling_is_tinkers_unclipped_ratio_times_advantage():
    rho = np.exp(np.subtract(LP, Q))  # [e^0.2, e^-0.3, 1]
    loss, grad = tinker_step("importance_sampling", {})
    assert loss == pytest.approx(-float(np.sum(rho * ADV)), abs=1e-6)
    assert grad == pytest.approx((-rho * ADV).tolist())


def test_ppo_is_tinkers_min_of_clipped_and_unclipped_and_honours_thresholds():
    rho = np.exp(np.subtract(LP, Q))  # 1.2214 (A=2), 0.7408 (A=-1), 1 (A=0.5)

    def tinker_ppo(low: float, high: float) -> float:
        return -float(np.sum(np.minimum(rho * ADV, np.clip(rho, low, high) * ADV)))

    # defaults 0.8 / 1.2: both tokens clipped, min(2.443, 1.2 * 2) = 2.4 and min(-0.741, 0.8 * -1) = -0.8
    assert tinker_step("ppo", {})[0] == pytest.approx(tinker_ppo(0.8, 1.2), abs=1e-6)
    assert tinker_ppo(0.8, 1.2) == pytest.approx(-(2.4 - 0.8 + 0.5), abs=1e-6)
    loss, grad = tinker_step("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1})
    assert loss == pytest.approx(tinker_ppo(0.9, 1.1), abs=1e-6)
    # clipped tokens get no gradient: token 0 (above 1.1 with A > 0) and token 1 (below 0.9 with A < 0)
    assert grad == pytest.approx([0.0, 0.0, -0.5])


def test_cispo_is_tinkers_detached_clipped_ratio_times_logprob():
    rho = np.exp(np.subtract(LP, Q))

    def tinker_cispo(low: float, high: float) -> tuple[float, list[float]]:
        w = np.clip(rho, low, high)
        return -float(np.sum(w * np.array(LP) * ADV)), (-w * ADV).tolist()

    for config, (low, high) in [({}, (0.0, 4.0)), ({"clip_low_threshold": 0.8, "clip_high_threshold": 1.1}, (0.8, 1.1))]:
        loss, grad = tinker_step("cispo", config)
        expected_loss, expected_grad = tinker_cispo(low, high)
        assert loss == pytest.approx(expected_loss, abs=1e-6)
        assert grad == pytest.approx(expected_grad)  # the ratio is detached: d/dlp = -clip(rho) * A


def test_cross_entropy_is_tinkers_weighted_negative_logprob_sum():
    import tinker_core.registry  # noqa: F401 - the registered losses

    data = [datum([1, 5, 6, 7], [0.0, 0.5, 2.0])]
    batch, extra = datum_batch(data, "cross_entropy", pad_token_id=0)
    lp_B_T = np.array([[0.0, *LP]], dtype=np.float32)
    assert evaluate_loss(lp_B_T, batch, extra, "cross_entropy", {})["loss:sum"] == pytest.approx(-(0.5 * -1.0 + 2.0 * -0.5))


def test_score_tokens_gives_each_tokens_logprob_and_the_topk_of_the_models_distribution(policy):
    import torch

    from tinker_algos.model.models import LoraSpec, sequence_logprobs

    seqs = [[1, 20, 21, 22], [1, 30]]
    scored = tinker_ops.score_tokens(policy, seqs, topk=3)
    for seq, row in zip(seqs, scored, strict=True):
        ids = torch.tensor([seq])
        with torch.no_grad():
            expected = sequence_logprobs(policy.module, ids, torch.ones_like(ids))[0, 1:].numpy()
            logp = torch.log_softmax(policy.module(input_ids=ids).logits[0, :-1].float(), -1)
        assert np.isnan(row["logprobs"][0]) and np.allclose(row["logprobs"][1:], expected, atol=1e-5)
        assert row["topk_ids"].shape == (len(seq), 3) and row["topk_ids"][0].tolist() == [0, 0, 0]
        assert row["topk_logprobs"][0].tolist() == [tinker_ops.MASK_LOGPROB] * 3
        np.testing.assert_allclose(row["topk_logprobs"][1:, 0], logp.max(-1).values.numpy(), atol=1e-5)
        assert (np.diff(row["topk_logprobs"][1:], axis=1) <= 0).all()  # best first
    # with an adapter that changes the model, base=True scores the model without it
    policy.add_adapter("scored", LoraSpec(rank=2), seed=0)
    with torch.no_grad():
        for p in policy.adapter_parameters("scored"):
            p.add_(0.5)
    plain = tinker_ops.score_tokens(policy, seqs[:1], base=True)[0]["logprobs"]
    adapted = tinker_ops.score_tokens(policy, seqs[:1], adapter="scored")[0]["logprobs"]
    assert np.allclose(plain[1:], scored[0]["logprobs"][1:], atol=1e-5)
    assert not np.allclose(adapted[1:], plain[1:], atol=1e-3)


# ---- gspo and stable_reinforce: Tinker's config keys and the sequence ratio mask -------------


def test_gspo_takes_tinker_thresholds_and_stable_reinforce_its_own_keys():
    assert tinker_ops.loss_config("gspo", {}) == {"eps_low": pytest.approx(0.2), "eps_high": pytest.approx(0.2)}
    assert tinker_ops.loss_config("gspo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.5}) == {
        "eps_low": pytest.approx(0.1), "eps_high": pytest.approx(0.5)}
    with pytest.raises(ValueError, match="clip_high_threshold"):
        tinker_ops.loss_config("gspo", {"clip_high_threshold": 0.5})
    assert tinker_ops.loss_config("stable_reinforce", {"kl_coeff": 0.1}) == {"kl_coeff": 0.1}


def test_gspo_datum_batch_aligns_sequence_ratio_mask_within_the_trained_tokens():
    data = [{"tokens": [1, 5, 6, 7], "target_tokens": [5, 6, 7, 2], "loss_weights": [0, 1, 1, 1],
             "sequence_ratio_mask": [1, 0, 1, 1]},  # position 0 is not trained: out of the ratio too
            {"tokens": [1, 5], "target_tokens": [5, 6]}]  # no mask: every trained token
    batch, extra = tinker_ops.datum_batch(data, "gspo", pad_token_id=0)
    np.testing.assert_array_equal(extra["weights_B_T"], [[0, 0, 0, 1, 1], [0, 1, 1, 0, 0]])
    assert "weights_B_T" not in tinker_ops.datum_batch(data, "importance_sampling", pad_token_id=0)[1]
