"""Fidelity: one training step through the official ``tinker`` SDK (HTTP gateway) and the same step
through OpenTinker's own ``TrainingClient`` (gRPC) give the same loss, logprobs and LoRA weights.

Both paths end in the same model-host operations (``forward_backward`` with Tinker's token-sum
loss, ``optim_step`` with Adam), on the same host process and CPU kernels, from the same LoRA
initialisation (``lora_config.seed`` and the TrainingService ``seed`` are the same session seed).
So what could differ is only the translation: protobuf vs gRPC datum encoding, the loss-input
names, Adam's parameters and their defaults. On this CPU the two results are bit-identical
(maximum difference 0.0). Tolerance: the loss and logprobs are compared at 1e-6 relative and
the saved float32 adapter weights with ``torch.allclose(rtol=1e-5, atol=1e-7)``: room only for
float reduction order (e.g. the two sessions on hosts with other thread counts), while any
translation difference (a weight, a shifted target, an Adam default) is orders of magnitude
larger. After one step ``lora_A`` is its seeded init moved only by weight decay (its gradient is
0 while ``lora_B`` is 0), so equal ``lora_A`` also checks that both paths derive the same init.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")
pytest.importorskip("tinker_scheduler")

from tinker import types  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
SEQ = [1, 20, 21, 22, 30, 31, 2]
WEIGHTS = [0.0, 0.0, 1.0, 1.0, 0.5, 2.0]
ADAM = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.01, "grad_clip_norm": 0.0}
SEED = 3
SAMPLING_LP = [0.0, 0.0, -1.0, -2.0, -0.5, -3.0]
ADVANTAGES = [0.0, 0.0, 1.0, -1.0, 2.0, 0.5]
BETA = 0.5


@pytest.fixture(scope="module")
def scheduler():
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_TMPDIR", str(Path(tempfile.gettempdir()) / "opentinker-client-tests-ray"))
    Path(os.environ["RAY_TMPDIR"]).mkdir(parents=True, exist_ok=True)
    from tinker_scheduler import Scheduler

    with tempfile.TemporaryDirectory() as tmp:
        s = Scheduler(port=0, db=Path(tmp) / "s.db", runs_dir=Path(tmp) / "runs", num_cpus=2, paused=True,
                      runner="tinker_scheduler.testing:sleep_train", training_host_backend="local").start()
        yield s, Path(tmp) / "runs", s.store.add_tenant("alice")
        s.stop()


def adapter_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    (f,) = sorted(path.rglob("*.safetensors"))
    return load_file(str(f))


def test_a_step_through_the_tinker_sdk_equals_the_same_step_through_our_training_client(scheduler) -> None:
    from tinker_client.training import AdamParams, Datum, ServiceClient
    from tinker_scheduler.tinker_api import serve

    s, runs, key = scheduler
    gw = serve(s)
    try:
        # the Tinker SDK, over HTTP
        service = tinker.ServiceClient(base_url=gw.url, api_key="tml-" + key)
        theirs = service.create_lora_training_client(base_model="tiny", rank=4, seed=SEED).result()
        datum = types.Datum(model_input=types.ModelInput.from_ints(SEQ[:-1]),
                            loss_fn_inputs={"target_tokens": SEQ[1:], "weights": WEIGHTS})
        fb = theirs.forward_backward([datum], "cross_entropy").result()
        theirs.optim_step(types.AdamParams(**ADAM)).result()
        after = theirs.forward([datum], "cross_entropy").result()
        rl = types.Datum(model_input=types.ModelInput.from_ints(SEQ[:-1]), loss_fn_inputs={
            "target_tokens": SEQ[1:], "logprobs": SAMPLING_LP, "advantages": ADVANTAGES})
        dro = theirs.forward([rl], "dro", loss_fn_config={"beta": BETA}).result()
        theirs.save_weights_for_sampler("fidelity-sdk").result()

        # our TrainingClient, over gRPC, on the same scheduler
        with ServiceClient(s.address, api_key=key) as ours_service:
            ours = ours_service.create_lora_training_client("tiny", rank=4, seed=SEED)
            own = Datum(tokens=SEQ[:-1], target_tokens=SEQ[1:], loss_weights=WEIGHTS)
            fb_ours = ours.forward_backward([own], "cross_entropy").result()
            ours.optim_step(AdamParams(**ADAM)).result()
            after_ours = ours.forward([own], "cross_entropy").result()
            own_rl = Datum(tokens=SEQ[:-1], target_tokens=SEQ[1:], sampling_logprobs=SAMPLING_LP, advantages=ADVANTAGES)
            dro_ours = ours.forward([own_rl], "dro", loss_fn_config={"beta": BETA}).result()
            ours_path = Path(ours.save_weights_for_sampler("fidelity-ours").result())
            ours.close()
    finally:
        gw.stop()

    # the same loss (Tinker's sum, -sum_t w_t logp_t) and the same logprobs, before and after the step
    assert fb.metrics["loss:sum"] == pytest.approx(fb_ours.metrics["loss"], rel=1e-6)
    assert fb.loss_fn_outputs[0]["logprobs"].tolist() == pytest.approx(fb_ours.loss_fn_outputs[0]["logprobs"].tolist(), rel=1e-6)
    assert after.metrics["loss:sum"] == pytest.approx(after_ours.metrics["loss"], rel=1e-6)
    assert after.metrics["loss:sum"] < fb.metrics["loss:sum"]  # the step did something
    # dro with its loss_fn_config through both paths: Tinker's formula on the logprobs returned
    lp = dro.loss_fn_outputs[0]["logprobs"].tolist()
    expected = -sum(p * a - BETA / 2 * (p - q) ** 2 for p, q, a in zip(lp, SAMPLING_LP, ADVANTAGES, strict=True))
    assert dro.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    assert dro.metrics["loss:sum"] == pytest.approx(dro_ours.metrics["loss"], rel=1e-6)
    # the same adapter weights (peft's saved names carry no adapter name: the same keys on both)
    (sdk_dir,) = runs.glob("alice/sessions/*/sampler/fidelity-sdk")
    sdk, own_w = adapter_tensors(sdk_dir), adapter_tensors(ours_path)
    assert sdk.keys() == own_w.keys() and any("lora_B" in k for k in sdk)
    for name, tensor in sdk.items():
        assert torch.allclose(tensor, own_w[name], rtol=1e-5, atol=1e-7), name
    assert any(bool(t.abs().sum() > 0) for k, t in sdk.items() if "lora_B" in k)  # B left its zero init
