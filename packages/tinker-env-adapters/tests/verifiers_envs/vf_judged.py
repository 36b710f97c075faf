"""A verifiers environment whose rubric asks a judge model (what the adapter refuses by default)."""

import verifiers as vf
from datasets import Dataset
from openai import AsyncOpenAI


def load_environment(**kwargs) -> vf.Environment:
    dataset = Dataset.from_list([{"question": "Name a prime.", "answer": "7"}])
    judge = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="judge")
    rubric = vf.JudgeRubric(judge_client=judge, judge_model="judge-model")

    async def judged(judge, prompt, completion, answer, state, **kwargs) -> float:
        return 1.0 if "yes" in (await judge(prompt, completion, answer, state)).lower() else 0.0

    rubric.add_reward_func(judged)
    return vf.SingleTurnEnv(dataset=dataset, rubric=rubric)
