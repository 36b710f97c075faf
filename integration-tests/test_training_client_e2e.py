"""The TrainingService client against a real in-process scheduler (tinker-scheduler + tinker-algos)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tinker_client.training import AdamParams, Datum, SamplingParams, ServiceClient

ROOT = Path(__file__).resolve().parents[1]


# ---- against a scheduler ----------------------------------------------------------------------
needs_scheduler = pytest.mark.skipif(
    importlib.util.find_spec("tinker_scheduler") is None or importlib.util.find_spec("torch") is None,
    reason="needs tinker-scheduler and tinker-algos (a real scheduler serves the TrainingService)",
)


@pytest.fixture(scope="module")
def scheduler():
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_TMPDIR", str(Path(tempfile.gettempdir()) / "opentinker-client-tests-ray"))
    Path(os.environ["RAY_TMPDIR"]).mkdir(parents=True, exist_ok=True)
    import torch

    from tinker_scheduler import Scheduler

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        s = Scheduler(port=0, db=Path(tmp) / "s.db", runs_dir=Path(tmp) / "runs", num_cpus=2, paused=True,
                      runner="tinker_scheduler.testing:sleep_train", training_host_backend="local").start()
        yield s
        s.stop()


@needs_scheduler
def test_a_lora_training_client_trains_samples_and_saves(scheduler):
    with ServiceClient(scheduler.address) as service:
        trainer = service.create_lora_training_client("tiny", rank=4, seed=0)
        assert trainer.info.lora_rank == 4 and trainer.info.context_length == 1024
        # tokenizer_id: the tiny preset's directory (what AutoTokenizer.from_pretrained loads)
        assert Path(trainer.info.tokenizer_id).name.startswith("tiny-") and Path(trainer.info.tokenizer_id).is_dir()
        tok = trainer.get_tokenizer()
        prompt = tok.encode("12+35=")
        assert tok.decode(prompt) == "12+35=" and prompt[0] == tok.bos_token_id
        datum = Datum.from_sequence(prompt + tok.encode("47\n", add_special_tokens=False), prompt_len=len(prompt))
        # futures: submitted together, executed in order (forward_backward before optim_step)
        fb1 = trainer.forward_backward([datum], "cross_entropy")
        step = trainer.optim_step(AdamParams(learning_rate=0.05))
        fb2 = trainer.forward_backward([datum], "cross_entropy")
        assert step.result().step == 1
        assert fb2.result().metrics["loss"] < fb1.result().metrics["loss"]
        assert fb1.result().loss_fn_outputs[0]["logprobs"].shape == (len(datum.tokens),)

        async def sample_async():
            fut = await trainer.sample_async([prompt, np.array(prompt)], SamplingParams(max_tokens=3, seed=1), num_samples=2)
            return await fut

        rows = asyncio.run(sample_async())
        assert [len(r) for r in rows] == [2, 2]
        assert all(len(s.tokens) == len(s.logprobs) and s.stop_reason in ("length", "stop_token") for r in rows for s in r)
        path = trainer.save_state("after-one").result()
        assert trainer.load_state(path).result() == 1
        sampler = trainer.save_weights_and_get_sampling_client("frozen")
        frozen = sampler.sample(prompt, 2, SamplingParams(max_tokens=3, seed=1)).result()
        current = trainer.sampling_client().sample(prompt, 2, SamplingParams(max_tokens=3, seed=1)).result()
        assert [s.tokens for s in frozen.sequences] == [s.tokens for s in current.sequences]
        trainer.close()
        trainer.close()  # idempotent


@needs_scheduler
def test_the_custom_loop_example_runs_a_few_steps(scheduler):
    spec = importlib.util.spec_from_file_location("custom_loop", ROOT / "examples" / "custom_loop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main([
        "--address", scheduler.address, "--sft-steps", "2", "--sft-batch", "8", "--steps", "2",
        "--prompts", "4", "--group-size", "4", "--eval-size", "8", "--eval-every", "1",
    ])
    assert 0.0 <= result["eval/accuracy"] <= 1.0 and 0.0 <= result["train/reward_mean"] <= 1.0
    assert module.group_advantages([1, 0, 0, 1]) == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5)
