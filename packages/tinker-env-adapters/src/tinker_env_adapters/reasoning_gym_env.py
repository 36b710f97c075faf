"""reasoning-gym tasks as single-turn OpenTinker envs: ``reasoning_gym/<task>-v0``.

reasoning-gym (``pip install 'tinker-env-adapters[reasoning-gym]'``) generates problems
procedurally: ``create_dataset(task, size=..., seed=..., **config)`` gives ``size`` entries
(``{"question", "answer", "metadata"}``), entry ``i`` drawn from ``Random(seed + i)``, and the
dataset's ``score_answer(answer, entry)`` scores an answer in ``[0, 1]``. The mapping:

- ``reset(seed)`` draws an entry index from the env's ``np_random`` (``options={"index": i}``
  picks one); the observation is the entry's question;
- ``step(action)``: the answer is the text inside the last ``<answer>...</answer>`` of the
  action (reasoning-gym's ``extract_answer``), or the whole stripped action when it has none;
  the reward is ``score_answer(answer, entry)``, clipped to ``[0, 1]``; one step, terminated;
- the spec's ``system_prompt`` asks chat models for the ``<answer>`` tags;
- ``split="test"`` builds the dataset from seed ``seed + TEST_SEED_OFFSET``, so the generator
  seeds of the test entries (``[seed + 10**9, seed + 10**9 + size)``) never meet the train
  entries' (``[seed, seed + size)``) for any size below 10**9.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from typing import Any

from tinker_core import EnvSpec, TextEnv, UnknownNameError
from tinker_env_adapters._common import AdapterError, adapter_spec, require

__all__ = ["SYSTEM_PROMPT", "TEST_SEED_OFFSET", "ReasoningGymEnv", "reasoning_gym_spec"]

TEST_SEED_OFFSET = 10**9
SYSTEM_PROMPT = (
    "Answer the question. Think step by step if it helps, then give only the final answer "
    "inside <answer></answer> tags."
)
EXTRA = "reasoning-gym"


def reasoning_gym_spec(task: str) -> EnvSpec:
    """The registered spec of ``reasoning_gym/<task>-v0``."""
    return adapter_spec(
        f"reasoning_gym/{task}-v0", "reasoning-gym",
        f"reasoning-gym task {task!r}: a procedurally generated question; the reward is "
        "reasoning-gym's score_answer (0 to 1) of the answer in <answer></answer> (or of "
        "the whole reply). One step.",
        about={"task": task},
        kwargs={
            "size": "number of distinct problems (default 1000)",
            "seed": "dataset seed (default 0)",
            "split": "'train' or 'test' (test: disjoint generator seeds)",
            "config": "the task's reasoning-gym config fields (a dict)",
        },
        max_turns=1, reward_range=(0.0, 1.0), action_format="reasoning, then <answer>final answer</answer>",
        system_prompt=SYSTEM_PROMPT,
    )


class ReasoningGymEnv(TextEnv):
    """One reasoning-gym task as a single-turn env (see the module docstring).

    Args:
        task: the reasoning-gym dataset name (``basic_arithmetic``, ``countdown``...).
        size: how many distinct problems the dataset holds (entry indices ``0..size-1``).
        seed: the dataset seed (the problems), independent of the episode seed of ``reset``.
        split: ``"train"`` or ``"test"``: the test split's problems come from generator seeds
            the train split never uses.
        config: the task's own config fields (reasoning-gym's ``<Task>Config`` dataclass, e.g.
            ``{"min_terms": 2, "max_terms": 3}`` for ``basic_arithmetic``), without size/seed.
    """

    def __init__(
        self,
        task: str,
        *,
        size: int = 1000,
        seed: int = 0,
        split: str = "train",
        config: dict[str, Any] | None = None,
    ) -> None:
        self.env_spec = reasoning_gym_spec(task)
        env_id = self.env_spec.id
        if not isinstance(size, int) or size < 1:
            raise AdapterError(f"env {env_id!r}: size must be an int >= 1, got {size!r}")
        if split not in ("train", "test"):
            raise AdapterError(f"env {env_id!r}: split must be 'train' or 'test', got {split!r}")
        config = dict(config or {})
        clash = sorted({"size", "seed"} & set(config))
        if clash:
            raise AdapterError(f"env {env_id!r}: pass {clash} as env kwargs, not inside config")
        rg = require("reasoning_gym", env_id, EXTRA)
        from reasoning_gym.factory import DATASETS
        from reasoning_gym.utils import extract_answer

        if task not in DATASETS:
            unknown_task = UnknownNameError("reasoning-gym task", task, DATASETS).message
            raise AdapterError(f"env {env_id!r}: the installed reasoning-gym has no task {task!r} ({unknown_task})")
        config_cls = DATASETS[task][1]
        fields = sorted(f.name for f in dataclasses.fields(config_cls)) if dataclasses.is_dataclass(config_cls) else []
        unknown = sorted(set(config) - set(fields)) if fields else []
        if unknown:
            raise AdapterError(
                f"env {env_id!r}: config has unknown field(s) {unknown}; "
                f"{config_cls.__name__} has: {', '.join(f for f in fields if f not in ('size', 'seed'))}"
            )
        dataset_seed = seed + (TEST_SEED_OFFSET if split == "test" else 0)
        try:
            self.dataset = rg.create_dataset(task, size=size, seed=dataset_seed, **config)
        except (TypeError, ValueError, AssertionError) as e:
            raise AdapterError(f"env {env_id!r}: reasoning-gym rejected config {config}: {e}") from e
        self._extract_answer = extract_answer
        self.task, self.size, self.seed, self.split = task, size, seed, split
        if config:
            self.env_spec = replace(self.env_spec, metadata={**self.env_spec.metadata, "config": config})
        self._entry: dict[str, Any] | None = None
        self._index = 0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(self.size))
        elif not isinstance(index, int) or not 0 <= index < self.size:
            raise AdapterError(f"env {self.env_spec.id!r}: options['index'] must be an int in [0, {self.size}), got {index!r}")
        self._index = index
        self._entry = self.dataset[index]
        return str(self._entry["question"]), self._info()

    def _info(self) -> dict[str, Any]:
        assert self._entry is not None
        return {"task": self.task, "split": self.split, "index": self._index, "answer": str(self._entry["answer"])}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._entry is None:
            return "", 0.0, True, False, {"error": "the episode is over (one step per problem); call reset()"}
        entry, info = self._entry, self._info()
        self._entry = None
        tagged = self._extract_answer(action)
        answer = tagged if tagged is not None else action.strip()
        try:
            score = float(self.dataset.score_answer(answer, entry))
        except Exception as e:  # a scorer that chokes on garbage scores it 0
            score = 0.0
            info["score_error"] = f"{type(e).__name__}: {e}"
        if not math.isfinite(score):
            score = 0.0
        score = min(1.0, max(0.0, score))
        info.update(parsed=answer, score=score)
        return "", score, True, False, info

    def render(self) -> str:
        return "" if self._entry is None else str(self._entry["question"])
