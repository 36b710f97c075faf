"""The sums tasks for inspect-ai: the same JSONL files as the lm-eval tasks."""

from inspect_ai import Task, task
from inspect_ai.dataset import FieldSpec, Sample, json_dataset
from inspect_ai.scorer import choice, match
from inspect_ai.solver import generate, multiple_choice


@task
def sums_gen() -> Task:
    """Answer "a+b=" with the sum (generation, scored by a match at the start of the answer)."""
    return Task(
        dataset=json_dataset("sums_gen.jsonl", FieldSpec(input="question", target="answer")),
        solver=generate(),
        scorer=match(location="begin"),
    )


@task
def sums_mc() -> Task:
    """Pick the sum among four choices (inspect's multiple_choice solver: the model writes a letter)."""

    def record(r: dict) -> Sample:
        return Sample(input=r["question"], choices=r["choices"], target="ABCD"[r["answer"]])

    return Task(
        dataset=json_dataset("sums_mc.jsonl", record),
        solver=multiple_choice(),
        scorer=choice(),
    )
