"""The GRPO engine's fast paths (issue 13) keep their promises: env calls in one pooled worker
thread, one prefill row per distinct prompt, stop-string decodes only where one can complete,
and the pre-update logprobs taken from ``forward_backward`` instead of an extra forward pass."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import tinker_core
import tinker_core.registry
from tinker_algos import train
from tinker_algos.model.models import PolicyModel
from tinker_algos.records.metrics import read_metrics
from tinker_algos.rollout.episodes import rollout
from tinker_algos.sampling.decode_rows import stop_enders
from tinker_algos.sampling.sampler import SamplingParams, sample
from tinker_algos.training.trainer import Trainer
from tinker_core import EnvSpec, TextEnv, hookimpl


class ThreadsEnv(TextEnv):
    """``Say hi:``; records the thread of every ``reset`` and ``step`` call."""

    env_spec = EnvSpec(id="algostest/threads-v0", description="records the threads that call it", max_turns=2)
    seen: list[threading.Thread] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        ThreadsEnv.seen.append(threading.current_thread())
        return "Say hi:\n", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        ThreadsEnv.seen.append(threading.current_thread())
        return "again:\n", 0.5, False, False, {}


class ParityEnv(TextEnv):
    """``Say hi:``; reward 1 for an action of odd length, else 0: rewards that differ in a group."""

    env_spec = EnvSpec(id="algostest/parity-v0", description="rewards odd-length actions", max_turns=1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "Say hi:\n", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", float(len(action) % 2), True, False, {}


class _TestEnvsPlugin:
    @hookimpl
    def opentinker_register_envs(self, register: Any) -> None:
        register(ThreadsEnv.env_spec, ThreadsEnv)
        register(ParityEnv.env_spec, ParityEnv)


@pytest.fixture
def threads_env() -> Iterator[list[threading.Thread]]:
    if "algostest/threads-v0" not in tinker_core.registry.get_registry("envs"):
        tinker_core.registry.register_plugin(_TestEnvsPlugin(), name="algostest-fast-paths")
    ThreadsEnv.seen = []
    yield ThreadsEnv.seen


def test_env_calls_run_in_one_pooled_worker_not_a_thread_each(policy: PolicyModel, threads_env: list[threading.Thread]) -> None:
    factory = lambda: tinker_core.make_env("algostest/threads-v0")  # noqa: E731
    params = SamplingParams(max_new_tokens=3, stop=("\n",), seed=0)
    result = rollout(policy, factory, list(range(6)), params, turn_timeout_s=30.0)
    assert not result.errors and [e.turns for e in result.episodes] == [2] * 6
    assert len(threads_env) == 6 * 3  # 6 resets, 2 steps each
    assert len(set(threads_env)) == 1 and threads_env[0] is not threading.current_thread()
    threads_env.clear()
    rollout(policy, factory, [0, 1], params, turn_timeout_s=None)  # no limit: called inline
    assert set(threads_env) == {threading.current_thread()}


def test_rows_with_the_same_prompt_are_prefilled_once(policy: PolicyModel) -> None:
    prompts = [p for p in ["12+34=", "7-2=", "100+1="] for _ in range(4)]  # a GRPO step: 3 tasks x 4
    params = SamplingParams(max_new_tokens=6, seed=3, stop=["\n"])
    rows: list[int] = []
    handle = policy.base_model.register_forward_pre_hook(lambda m, a, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
    try:
        fast = sample(policy, prompts, params)
    finally:
        handle.remove()
    assert rows[0] == 3 and set(rows[1:]) <= {12}  # the prefill: one row per distinct prompt
    ref = sample(policy, prompts, params, use_cache=False)
    for g1, g2 in zip(fast, ref, strict=True):
        for a, b in zip(g1, g2, strict=True):
            assert (a.tokens, a.stop_reason, a.text) == (b.tokens, b.stop_reason, b.text)
            np.testing.assert_allclose(a.raw_logprobs, b.raw_logprobs, atol=1e-5)


def test_stop_strings_are_checked_only_where_one_can_complete(policy: PolicyModel, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = policy.tokenizer
    enders = stop_enders(tok, ("\n",), len(tok), "cpu")
    assert enders.sum() >= 1 and all("\n" in tok.decode([i]) for i in np.flatnonzero(enders.numpy()))
    assert bool(stop_enders(tok, ("ab ",), len(tok), "cpu").all())  # a trailing space: every token may end it
    decodes: list[list[int]] = []
    real = tok.decode
    monkeypatch.setattr(tok, "decode", lambda ids, *a, **kw: (decodes.append(list(ids)), real(ids, *a, **kw))[1])
    B, N = 8, 16
    out = sample(policy, ["ab"] * 4 + ["cd"] * 4, SamplingParams(max_new_tokens=N, seed=0, stop=["\n"], stop_at_eos=False))
    # before: one decode per live row per step (up to B x N); now a check only after a newline,
    # plus at most one decode per row for the sample's text
    assert len(decodes) <= 2 * B
    for group in out:
        for s in group:
            assert ("\n" in s.text) == (s.stop_reason == "stop_string")


def grpo_job(temperature: float) -> dict[str, Any]:
    return {
        "name": "grpo-fast",
        "seed": 3,
        "model": {"name": "tiny"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd", "ef"]}},
        "algorithm": {"name": "grpo", "steps": 2, "eval_size": 2, "eval_every": 0},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4, "stop": ["\n"], "temperature": temperature},
        "optimizer": {"lr": 0.003},
        "logging": {"tensorboard": False, "plot": False},
    }


@pytest.mark.usefixtures("algos_and_echo_plugins")
@pytest.mark.parametrize(("temperature", "dropout", "extra_forwards"), [(1.0, 0.0, 0), (0.7, 0.0, 0), (0.7, 0.1, 2)])
def test_grpo_takes_pre_update_logprobs_from_forward_backward(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, temperature: float, dropout: float, extra_forwards: int
) -> None:
    """The loss's pass scores at the sampling temperature, so no second forward runs (but with
    dropout, whose training pass is random) and sampler and trainer agree at any temperature."""
    calls: list[float] = []
    real = Trainer.forward

    def counting(self: Trainer, batch: Any, **kw: Any) -> Any:
        calls.append(kw.get("temperature", 1.0))
        return real(self, batch, **kw)

    monkeypatch.setattr(Trainer, "forward", counting)
    job = grpo_job(temperature)
    if dropout:
        job["lora"] = {"rank": 4, "alpha": 8, "dropout": dropout}
    train(job, run_dir=tmp_path)
    assert calls == [temperature] * extra_forwards  # the loss's own pass gives them
    rows = read_metrics(tmp_path / "metrics.jsonl")
    for r in rows:
        assert 0 <= r["kl/sample_train"] < 1e-4 and r["rollout/logprob_mean_abs_diff"] < 1e-4
        assert 0 < r["time/rollout_s"] < r["time/step_s"]


@pytest.mark.usefixtures("algos_and_echo_plugins")
def test_a_sampler_trainer_mismatch_is_warned_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A trainer whose logprobs are 0.5 nats off the sampler's (as with a sampler that ignores the
    adapter) is reported every step and warned about once."""
    real = Trainer.forward_backward

    def shifted(self: Trainer, batch: Any, *args: Any, **kw: Any) -> Any:
        out = real(self, batch, *args, **kw)
        return (out[0], out[1] - 0.5) if kw.get("return_logprobs") else out

    monkeypatch.setattr(Trainer, "forward_backward", shifted)
    job = grpo_job(1.0)
    job["algorithm"]["steps"] = 3
    with caplog.at_level("WARNING", logger="tinker_algos.algorithms.update"):
        train(job, run_dir=tmp_path)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [round(r["rollout/logprob_mean_abs_diff"], 3) for r in rows] == [0.5] * 3
    warnings = [r.getMessage() for r in caplog.records if "logprob_mean_abs_diff" in r.getMessage()]
    assert len(warnings) == 1 and "0.5 nats" in warnings[0]


@pytest.mark.usefixtures("algos_and_echo_plugins", "threads_env")
def test_max_staleness_one_samples_ahead_deterministically_and_resumes_exactly(tmp_path: Any, stop_after: Any, deterministic_metrics: Any) -> None:
    job = grpo_job(1.0)
    job["env"] = {"id": "algostest/parity-v0"}
    job["algorithm"].update(steps=4, loss="ppo")
    job["rollout"]["max_staleness"] = 1
    job["checkpoint"] = {"every": 1, "keep": 5}
    train(job, run_dir=tmp_path / "full")
    train(job, run_dir=tmp_path / "again")
    full = deterministic_metrics(tmp_path / "full")
    assert deterministic_metrics(tmp_path / "again") == full  # timing never changes a batch
    # step 1 samples on-policy; later batches were sampled one update earlier, so once an update
    # moved the weights the sampler's logprobs differ from the trainer's (at k = 0: float noise)
    moved = [i for i, r in enumerate(full) if r["optim/grad_norm"] > 0]
    assert full[0]["kl/sample_train"] < 1e-6 and moved and moved[0] + 1 < len(full)
    assert full[moved[0] + 1]["kl/sample_train"] > 1e-4
    part = train(job, run_dir=tmp_path / "part", callbacks=stop_after(2))
    assert part.status == "interrupted" and part.step == 2
    train(job, run_dir=tmp_path / "part")
    assert deterministic_metrics(tmp_path / "part") == full


def tied_batch(policy: PolicyModel) -> tuple[Any, np.ndarray]:
    """12 sampled rows (4 prompts x 3) and advantages that are 0 on rows 0-2 (a tied group) and 7."""
    from tinker_algos.sampling.sampler import sequences_to_batch

    seqs = sample(policy, ["12+34=", "7-2=", "100+1=", "ab"], SamplingParams(max_new_tokens=5, seed=1, n=3, stop_at_eos=False))
    batch = sequences_to_batch(seqs, pad_token_id=policy.pad_token_id, raw=True)
    adv = np.random.default_rng(0).normal(size=batch.tokens_B_T.shape).astype(np.float32) * batch.loss_mask_B_T
    adv[[0, 1, 2, 7]] = 0.0
    return batch, adv


@pytest.mark.parametrize(("loss", "agg"), [("ppo", "token-mean"), ("importance_sampling", "seq-mean-token-mean"), ("cispo", "token-mean")])
def test_zero_advantage_rows_skip_the_gradient_pass_with_the_same_gradient_and_metrics(policy: PolicyModel, loss: str, agg: str) -> None:
    from tinker_algos.algorithms.update import policy_update
    from tinker_algos.training.trainer import TrainerConfig

    batch, adv = tied_batch(policy)
    B = batch.tokens_B_T.shape[0]
    results = {}
    for skip in (False, True):
        trainer = Trainer(policy, TrainerConfig(lr=1e-3, share_prefix=False))  # one pass per row: the calls count rows
        rows: list[int] = []
        handle = policy.base_model.get_decoder().register_forward_pre_hook(lambda m, a, kw, rows=rows: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
        try:
            metrics, logprobs, scored = policy_update(trainer, batch, loss, agg, adv, {}, skip=skip)
        finally:
            handle.remove()
        grads = [p.grad.clone() for p in trainer.params]
        trainer.zero_grad()
        results[skip] = (metrics, logprobs, grads, rows)
        assert scored.all()  # the skipped rows were forwarded: every row's logprobs and metrics
    (m0, lp0, g0, rows0), (m1, lp1, g1, rows1) = results[False], results[True]
    assert rows0 == [B] and sorted(rows1) == [4, B - 4]  # gradient pass on 8 rows, no-grad pass on 4
    np.testing.assert_allclose(lp1, lp0, atol=1e-5)
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-4)
    assert m1.keys() == m0.keys()
    for k in m0:
        assert m1[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-6), k


def test_skipped_rows_need_no_forward_when_their_metrics_may_cover_the_trained_rows(policy: PolicyModel) -> None:
    from tinker_algos.algorithms.update import policy_update
    from tinker_algos.training.trainer import TrainerConfig

    batch, adv = tied_batch(policy)
    B = batch.tokens_B_T.shape[0]
    out = {}
    for forward_skipped in (True, False):
        trainer = Trainer(policy, TrainerConfig(lr=1e-3, share_prefix=False))  # one pass per row: the calls count rows
        rows: list[int] = []
        handle = policy.base_model.get_decoder().register_forward_pre_hook(lambda m, a, kw, rows=rows: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
        try:
            metrics, logprobs, scored = policy_update(trainer, batch, "ppo", "token-mean", adv, {}, skip=True, forward_skipped=forward_skipped)
        finally:
            handle.remove()
        out[forward_skipped] = (metrics, logprobs, scored, [p.grad.clone() for p in trainer.params], rows)
        trainer.zero_grad()
    (m_all, lp_all, _, g_all, _), (m, lp, scored, g, rows) = out[True], out[False]
    assert rows == [B - 4]  # the gradient pass only: no forward over the 4 skipped rows
    assert scored.tolist() == [i not in (0, 1, 2, 7) for i in range(B)]
    np.testing.assert_allclose(lp[scored], lp_all[scored], atol=1e-6)
    for a, b in zip(g_all, g, strict=True):
        torch.testing.assert_close(b, a)  # the same update
    assert m["loss"] == pytest.approx(m_all["loss"]) and m["num_tokens"] == m_all["num_tokens"]


def _plugin_pg(inputs: Any) -> Any:
    """A plugin's policy loss, written as a third party would: ``-rho * A`` on the trained tokens."""
    from tinker_core.contracts import LossOutputs

    ratio = torch.exp(inputs.logprobs_B_T - inputs.sampling_logprobs_B_T)
    loss_B_T = torch.where(inputs.mask_B_T != 0, -ratio * inputs.advantages_B_T, torch.zeros_like(ratio))
    return LossOutputs(loss_B_T, {"ratio_mean": float((ratio.detach() * inputs.mask_B_T).sum() / inputs.mask_B_T.sum())})


class _PluginLosses:
    @hookimpl
    def opentinker_register_losses(self, register: Any) -> None:
        register("algostest_pg", _plugin_pg, vanishes_at_zero_advantage=True, description="-rho * A, declared")
        register("algostest_pg_undeclared", _plugin_pg, description="-rho * A, not declared")


@pytest.mark.usefixtures("fresh_tinker_algos_plugins")
def test_a_plugin_loss_gets_the_zero_advantage_fast_path_by_declaring_it_at_registration(policy: PolicyModel) -> None:
    from tinker_algos.algorithms.update import policy_update, vanishes_at_zero_advantage
    from tinker_algos.training.trainer import TrainerConfig

    tinker_core.registry.register_plugin(_PluginLosses(), distribution="algostest-losses")
    # the built-ins declare it through the same register call
    assert [vanishes_at_zero_advantage(n) for n in ("importance_sampling", "ppo", "cispo", "dro")] == [True, True, True, False]
    assert vanishes_at_zero_advantage("algostest_pg") and not vanishes_at_zero_advantage("algostest_pg_undeclared")
    batch, adv = tied_batch(policy)
    B = batch.tokens_B_T.shape[0]
    results = {}
    for loss, skip in (("algostest_pg", False), ("algostest_pg", True), ("algostest_pg_undeclared", True)):
        trainer = Trainer(policy, TrainerConfig(lr=1e-3, share_prefix=False))  # one pass per row: the calls count rows
        rows: list[int] = []
        handle = policy.base_model.get_decoder().register_forward_pre_hook(lambda m, a, kw, rows=rows: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
        try:
            metrics, _, scored = policy_update(trainer, batch, loss, "token-mean", adv, {}, skip=skip)
        finally:
            handle.remove()
        results[loss, skip] = (metrics, [p.grad.clone() for p in trainer.params], rows)
        trainer.zero_grad()
        assert scored.all()
    (m0, g0, rows0), (m1, g1, rows1), (_, g2, rows2) = results.values()
    assert rows0 == [B] and sorted(rows1) == [4, B - 4]  # declared: gradient pass on 8 rows, no-grad pass on 4
    assert rows2 == [B]  # undeclared: the whole batch goes through the gradient pass
    for a, b, c in zip(g0, g1, g2, strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-4)
        torch.testing.assert_close(c, a)
    assert m1["loss"] == pytest.approx(m0["loss"], rel=1e-4, abs=1e-6)
    assert m1["algostest_pg/ratio_mean"] == pytest.approx(m0["algostest_pg/ratio_mean"], rel=1e-4)
