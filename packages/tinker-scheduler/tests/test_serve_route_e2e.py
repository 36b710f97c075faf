"""Acceptance of ``scheduler start --serve-port``: a real LoRA SFT job of the tiny model runs on the
scheduler, then the official ``openai`` client talks to the scheduler's serve route with the
tenant's key. The job's adapter answers one-digit sums it never saw better than the base model
(which states no number at all); another tenant cannot see the job."""

from __future__ import annotations

import json
import random

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from tinker_core.proto import jobs_pb2  # noqa: E402
from tinker_scheduler import serve_route  # noqa: E402
from tinker_scheduler.config import DEFAULT_RUNNER  # noqa: E402
from tinker_scheduler.testing import JobStub  # noqa: E402
from tinker_scheduler.worker import resolve_runner  # noqa: E402


def _train_available() -> bool:
    try:
        resolve_runner(DEFAULT_RUNNER)
    except (ImportError, AttributeError):
        return False
    return True


pytestmark = pytest.mark.skipif(not _train_available(), reason=f"{DEFAULT_RUNNER} is not importable")

PAIRS = [(a, b) for a in range(10) for b in range(10)]
HELD_OUT = sorted(random.Random(0).sample(PAIRS, 12))
STEPS = 200


def sums_job(data: str) -> dict:
    """200 SFT steps of a rank-32 LoRA on every linear layer (attention and MLP) of the tiny model,
    on the 88 one-digit sums not held out. Measured on 12 seeds (0-12 but 11; recipe chosen on 3, 4,
    10, 12): 11-12 of the 12 held-out answers within one of the sum, 3-10 exact. The former recipe
    (100 steps, lr 0.003) failed on 3 of 5 seeds, seed 0 included once the CPU changed: a different
    CPU is a different seed. Attention-only adapters or lr 0.01 did not learn in 200."""
    return {
        "name": "serve-sums",
        "seed": 0,
        "model": {"name": "tiny", "device": "cpu"},
        "lora": {"rank": 32, "alpha": 64,
                 "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
        "algorithm": {"name": "sft", "steps": STEPS, "batch_size": 32, "data": data},
        "optimizer": {"name": "adamw", "lr": 0.002},
        "checkpoint": {"every": STEPS, "keep": 1},
        "logging": {"tensorboard": False, "plot": False},
        "resources": {"cpus": 1},
    }


def answer(client, model: str, a: int, b: int) -> int | None:
    text = client.completions.create(model=model, prompt=f"{a}+{b}=", max_tokens=3, temperature=0, stop=["\n"]).choices[0].text
    return int(text) if text.strip().isdigit() else None


@pytest.mark.slow
def test_a_finished_lora_job_answers_held_out_sums_better_than_its_base_through_openai(make_scheduler, tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "completion": f"{a + b}\n"}) + "\n"
                            for a, b in PAIRS if (a, b) not in HELD_OUT))
    scheduler = make_scheduler(runner=DEFAULT_RUNNER, model_roots=[tmp_path])
    alice, bob = scheduler.store.add_tenant("alice"), scheduler.store.add_tenant("bob")
    with JobStub(scheduler.address, api_key=alice) as jobs:
        job = jobs.submit(json.dumps(sums_job(str(data))), request_id="serve-sums")
        list(jobs.watch(job.id, timeout=300))
        final = jobs.get(job.id)
    assert final.state == jobs_pb2.JOB_STATE_SUCCEEDED, final.reason

    route = serve_route.serve(scheduler)
    try:
        client = openai.OpenAI(base_url=f"{route.url}/v1", api_key=alice, max_retries=0, timeout=120)
        assert [m.id for m in client.models.list()] == ["tiny", job.id]
        answers = {m: [answer(client, m, a, b) for a, b in HELD_OUT] for m in ("tiny", job.id)}
        truth = [a + b for a, b in HELD_OUT]
        assert answers["tiny"] == [None] * len(HELD_OUT)  # the untrained base never states a number
        exact = sum(x == t for x, t in zip(answers[job.id], truth, strict=True))
        close = sum(x is not None and abs(x - t) <= 1 for x, t in zip(answers[job.id], truth, strict=True))
        assert exact >= 2 and close >= 10, list(zip(answers[job.id], truth, strict=True))

        stream = client.completions.create(model=job.id, prompt="3+3=", max_tokens=3, temperature=0, stop=["\n"], stream=True)
        assert "".join(c.choices[0].text for c in stream) == str(answers[job.id][HELD_OUT.index((3, 3))])
        other = openai.OpenAI(base_url=f"{route.url}/v1", api_key=bob, max_retries=0)
        assert [m.id for m in other.models.list()] == []
        with pytest.raises(openai.NotFoundError) as info:
            other.completions.create(model=job.id, prompt="1+1=", max_tokens=2)
        assert info.value.body["code"] == "model_not_found"
    finally:
        route.stop()
