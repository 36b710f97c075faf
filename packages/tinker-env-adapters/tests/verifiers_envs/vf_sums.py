"""A verifiers environment written as verifiers' docs write one: a local dataset, a parser, a
Rubric of plain reward functions, and a SingleTurnEnv (``load_environment(tools=True)``: a
ToolEnv whose policy may call ``add``)."""

import verifiers as vf
from datasets import Dataset

PAIRS = [(2, 3), (4, 5), (10, 7), (6, 6)]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


def load_environment(tools: bool = False, num_examples: int = -1, **kwargs) -> vf.Environment:
    rows = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in PAIRS]
    dataset = Dataset.from_list(rows if num_examples < 0 else rows[:num_examples])
    eval_dataset = Dataset.from_list([{"question": "What is 20 + 22?", "answer": "42"}])
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def correct_answer(completion, answer, **kwargs) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    rubric = vf.Rubric(funcs=[correct_answer, parser.get_format_reward_func()], weights=[1.0, 0.0], parser=parser)
    system_prompt = "Answer inside <answer></answer>."
    if tools:
        return vf.ToolEnv(dataset=dataset, eval_dataset=eval_dataset, tools=[add], max_turns=3,
                          system_prompt=system_prompt, parser=parser, rubric=rubric, **kwargs)
    return vf.SingleTurnEnv(dataset=dataset, eval_dataset=eval_dataset, system_prompt=system_prompt, parser=parser,
                            rubric=rubric, **kwargs)
