"""A learning run through the Tinker API gateway, written only against ``tinker`` and
``tinker-cookbook``: the cookbook's RL trainer (``tinker_cookbook.rl.train``) and its
``ArithmeticEnv`` (the ``math_rl`` recipe's task, same few-shot prompt and reward), with one-digit
operands (0-9) instead of the recipe's 0-100, which SmolLM2-135M gets right 1-3% of the time.

Run it in the environment of ``integration-tests/tinker_sdk/sdk_venv.py`` with ``TINKER_BASE_URL``
and ``TINKER_API_KEY`` set (docs/guides/tinker-api.md):

    python bench/tinker_sdk_arithmetic.py MODEL_DIR LOG_PATH [key=value ...]

``key=value`` sets a field of ``tinker_cookbook.rl.train.Config`` (numbers as numbers).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from functools import partial

import chz
import numpy as np
from tinker_cookbook import renderers
from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticEnv
from tinker_cookbook.rl.problem_env import ProblemGroupBuilder
from tinker_cookbook.rl.train import Config, main
from tinker_cookbook.rl.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder
from tinker_cookbook.tokenizer_utils import get_tokenizer


class SmallSums(RLDataset):
    def __init__(self, batch_size: int, group_size: int, renderer: renderers.Renderer, n_batches: int, high: int) -> None:
        self.batch_size, self.group_size, self.renderer, self.n_batches, self.high = batch_size, group_size, renderer, n_batches, high

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        rng = np.random.RandomState(index)
        return [ProblemGroupBuilder(env_thunk=partial(ArithmeticEnv, int(rng.randint(0, self.high)), int(rng.randint(0, self.high)),
                                                      convo_prefix=ArithmeticEnv.standard_fewshot_prefix(), renderer=self.renderer),
                                    num_envs=self.group_size)
                for _ in range(self.batch_size)]

    def __len__(self) -> int:
        return self.n_batches


@chz.chz
class SmallSumsBuilder(RLDatasetBuilder):
    batch_size: int
    group_size: int
    model_name: str
    renderer_name: str
    n_batches: int = 100
    high: int = 10

    async def __call__(self) -> tuple[SmallSums, None]:
        renderer = renderers.get_renderer(self.renderer_name, tokenizer=get_tokenizer(self.model_name))
        return SmallSums(self.batch_size, self.group_size, renderer, self.n_batches, self.high), None


def run(model: str, log_path: str, overrides: dict) -> None:
    groups, group_size = overrides.pop("groups_per_batch", 8), overrides.pop("group_size", 4)
    renderer_name = overrides.pop("renderer_name", "qwen3_instruct")
    config = Config(
        dataset_builder=SmallSumsBuilder(batch_size=groups, group_size=group_size, model_name=model,
                                         renderer_name=renderer_name, high=overrides.pop("high", 10)),
        model_name=model, renderer_name=renderer_name, log_path=log_path, recipe_name="opentinker_small_sums",
        **{"learning_rate": 5e-4, "max_tokens": 6, "lora_rank": 16, "temperature": 0.7, "eval_every": 0,
           "save_every": 0, "loss_fn": "importance_sampling", **overrides})
    asyncio.run(main(config))


if __name__ == "__main__":
    pairs = dict(a.split("=", 1) for a in sys.argv[3:])
    run(sys.argv[1], sys.argv[2], {k: json.loads(v) if v[:1].isdigit() or v[:1] == "-" else v for k, v in pairs.items()})
