"""A verifiers environment whose rubric scores rollouts as a group (a rank among its group)."""

import verifiers as vf
from datasets import Dataset


def load_environment() -> vf.Environment:
    def shortest(completions, **kwargs) -> list[float]:
        lengths = [len(str(c)) for c in completions]
        return [1.0 if n == min(lengths) else 0.0 for n in lengths]

    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "Say hi.", "answer": "hi"}]),
                            rubric=vf.Rubric(funcs=[shortest]))
