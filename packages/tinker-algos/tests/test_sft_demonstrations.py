"""SFT on an env's own demonstrations (``info["target"]``, the ideal next action): a multi-turn
tool episode is replayed turn by turn through the rollout's renderer, trained on every action and
nothing else; a single-turn env still trains on exactly the prompt and its target. A
``{"messages": [...]}`` record is replayed the same way: its tokens are the chat template's
rendering of the whole conversation, only the assistant replies (each with its end-of-turn token)
trained on; records that cannot be replayed are refused by line and message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tinker_algos.model.tokenizer import load_tokenizer
from tinker_core.tools import format_tool_call

IM_END = "<|im_end|>"


def spy_batches(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The batches every ``Trainer.forward_backward`` call gets, in order."""
    from tinker_algos.training.trainer import Trainer

    seen: list[Any] = []
    original = Trainer.forward_backward

    def spy(self: Any, batch: Any, *a: Any, **k: Any) -> Any:
        seen.append(batch)
        return original(self, batch, *a, **k)

    monkeypatch.setattr(Trainer, "forward_backward", spy)
    return seen


def job(model_dir: Path, env: dict[str, Any], batch_size: int = 2) -> dict[str, Any]:
    return {
        "name": "sft-demos",
        "model": {"name": str(model_dir), "device": "cpu"},
        "env": env,
        "lora": {"rank": 2, "alpha": 4},
        "stages": [{"algorithm": {"name": "sft", "steps": 1, "batch_size": batch_size, "eval_size": 1}}],
        "rollout": {"max_new_tokens": 2},
        "logging": {"tensorboard": False, "plot": False},
    }


def row(batch: Any, i: int, mask: str = "attention_mask_B_T") -> list[int]:
    return [int(t) for t, m in zip(batch.tokens_B_T[i], getattr(batch, mask)[i], strict=True) if m]


def spans(batch: Any, i: int) -> list[list[int]]:
    """The runs of trained (loss-mask 1) tokens of row ``i``."""
    out: list[list[int]] = []
    prev = 0.0
    for t, m, a in zip(batch.tokens_B_T[i], batch.loss_mask_B_T[i], batch.attention_mask_B_T[i], strict=True):
        if a and m:
            if not prev:
                out.append([])
            out[-1].append(int(t))
        prev = m if a else 0.0
    return out


def test_a_calculator_demonstration_trains_on_the_tool_call_and_the_answer(
    chat_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algos_and_math_plugins: None
) -> None:
    from tinker_algos import train
    from tinker_core.registry import make_env

    seen = spy_batches(monkeypatch)
    kwargs = {"digits": 2, "ops": "+", "num_terms": 2, "max_turns": 3, "tool_format": "native"}
    cfg = job(chat_model_dir, {"id": "math/calculator-v0", "kwargs": kwargs})
    assert train(cfg, run_dir=tmp_path / "run").status == "completed"
    tok = load_tokenizer(chat_model_dir)
    batch = seen[0]
    assert batch.tokens_B_T.shape[0] == 2
    expressions = set()
    for i in range(2):
        text = tok.decode(row(batch, i))
        trained = [tok.decode(s) for s in spans(batch, i)]
        assert len(trained) == 2, trained  # the call and the answer, nothing else
        call, answer = trained
        assert call.startswith("<tool_call>") and call.endswith(IM_END)
        expression = call.split('"expression": "')[1].split('"')[0]
        expressions.add(expression)
        value = str(sum(int(x) for x in expression.split("+")))
        assert call == format_tool_call("calculator", {"expression": expression}) + IM_END
        assert answer == f"<answer>{value}</answer>{IM_END}"
        # the tool's reply sits between the two turns (SmolLM2's template has a tool role), and
        # the tools are declared to the policy in the system message
        between = text[text.index(call) + len(call) : text.index(answer)]
        assert value in between and "tool" in between and "<|im_start|>assistant\n" in between
        assert '"name": "calculator"' in text[: text.index("What is")]
    # the replay is what the env scores: the same actions win its episode
    env = make_env("math/calculator-v0", **kwargs)
    obs, info = env.reset(seed=1)
    _, reward, terminated, _, info = env.step(info["target"])
    assert not terminated and info["target"] == f"<answer>{info['answer']}</answer>"
    _, reward, terminated, _, _ = env.step(info["target"])
    assert terminated and reward == 1.0
    assert len(expressions) == 2  # two different problems


def test_a_single_turn_demonstration_is_the_prompt_and_its_target(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algos_and_math_plugins: None
) -> None:
    from tinker_algos import train
    from tinker_algos.algorithms.common import example_trajectory

    seen = spy_batches(monkeypatch)
    cfg = job(tiny_dir, {"id": "math/arithmetic-v0", "kwargs": {"digits": 2, "ops": ["+"]}}, batch_size=3)
    assert train(cfg, run_dir=tmp_path / "run").status == "completed"
    tok = load_tokenizer(tiny_dir)
    batch = seen[0]
    for i in range(3):
        (trained,) = spans(batch, i)  # the target only, at the end of the row
        ids = row(batch, i)
        assert ids[-len(trained) :] == trained
        prompt = tok.decode(ids[: -len(trained)], skip_special_tokens=True)
        a, b = prompt.removesuffix("=").split("+")
        assert tok.decode(trained).strip() == str(int(a) + int(b))
        # exactly the plain-text example (prompt with <bos>, target) single-turn SFT always built
        assert ids == example_trajectory(tok, prompt, tok.decode(trained)).tokens_T.tolist()


def test_an_env_without_a_target_is_refused_by_name(
    tiny_dir: Path, tmp_path: Path, algos_and_games_plugins: None
) -> None:
    from tinker_algos import train
    from tinker_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"gives no text info\['target'\]"):
        train(job(tiny_dir, {"id": "games/guess-number-v0"}), run_dir=tmp_path / "run")

DIALOGUE = [
    {"role": "user", "content": "Pot: book=1 hat=2. Your move."},
    {"role": "assistant", "content": "PROPOSE book=1 hat=0"},
    {"role": "user", "content": "They propose book=0 hat=2 for you."},
    {"role": "assistant", "content": "ACCEPT"},
]


def data_job(model_dir: Path, data: Path, chat_template: str = "auto") -> dict[str, Any]:
    return {
        "name": "sft-conversations",
        "model": {"name": str(model_dir), "device": "cpu", "chat_template": chat_template},
        "lora": {"rank": 2, "alpha": 4},
        "stages": [{"algorithm": {"name": "sft", "steps": 1, "batch_size": 2, "data": str(data)}}],
        "logging": {"tensorboard": False, "plot": False},
    }


def write(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_conversation_is_the_templates_rendering_trained_on_the_replies_only(
    chat_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algos_and_math_plugins: None
) -> None:
    from tinker_algos import train

    system = {"role": "system", "content": "You negotiate."}
    data = write(tmp_path / "d.jsonl", [{"messages": [system, *DIALOGUE]}, {"messages": DIALOGUE[:2]}])
    seen = spy_batches(monkeypatch)
    assert train(data_job(chat_model_dir, data), run_dir=tmp_path / "run").status == "completed"
    tok = load_tokenizer(chat_model_dir)
    by_length = sorted(range(2), key=lambda i: len(row(seen[0], i)))
    short, long = by_length
    # every assistant reply and its end of turn, nothing of the user's or the system's text
    assert [tok.decode(s) for s in spans(seen[0], long)] == ["PROPOSE book=1 hat=0" + IM_END, "ACCEPT" + IM_END]
    assert [tok.decode(s) for s in spans(seen[0], short)] == ["PROPOSE book=1 hat=0" + IM_END]
    # the whole row is the template's own rendering of the conversation (its system message kept)
    rendered = tok.apply_chat_template([system, *DIALOGUE], tokenize=False)
    assert rendered.startswith(tok.decode(row(seen[0], long)))
    assert rendered[len(tok.decode(row(seen[0], long))):].strip() == ""


def test_a_conversation_for_a_plain_text_model_is_its_messages_in_order(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algos_and_math_plugins: None
) -> None:
    from tinker_algos import train

    turns = [{"role": "user", "content": "2+3="}, {"role": "assistant", "content": "5\n"},
             {"role": "user", "content": "4+4="}, {"role": "assistant", "content": "8\n"}]
    data = write(tmp_path / "d.jsonl", [{"messages": turns}])
    seen = spy_batches(monkeypatch)
    assert train(data_job(tiny_dir, data, chat_template="none"), run_dir=tmp_path / "run").status == "completed"
    tok = load_tokenizer(tiny_dir)
    assert tok.decode(row(seen[0], 0), skip_special_tokens=True) == "2+3=5\n4+4=8\n"
    assert [tok.decode(s) for s in spans(seen[0], 0)] == ["5\n", "8\n"]


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], r"'messages' must be a non-empty list"),
        ([{"role": "user", "content": 3}], r"messages\[0\] must be an object with string 'role' and 'content'"),
        ([{"role": "assistant", "content": "hi"}], r"messages\[0\] has role 'assistant' where 'user' is due"),
        ([{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
         r"messages\[2\] has role 'user' where 'assistant' is due"),
        ([{"role": "user", "content": "a"}], r"the last message must be an 'assistant' one"),
    ],
)
def test_a_conversation_that_cannot_be_replayed_is_refused_by_line_and_message(
    tmp_path: Path, messages: list[Any], match: str
) -> None:
    from tinker_algos.algorithms.sft import load_sft_records
    from tinker_core.errors import ConfigError

    data = write(tmp_path / "d.jsonl", [{"messages": messages}])
    with pytest.raises(ConfigError, match=r"algorithm\.data: .*d\.jsonl:1: " + match):
        load_sft_records(data)


def test_prompt_completion_and_conversation_records_mix_in_one_file(tmp_path: Path) -> None:
    from tinker_algos.algorithms.sft import load_sft_records

    data = write(tmp_path / "d.jsonl", [{"prompt": "1+1=", "completion": "2"}, {"messages": DIALOGUE}])
    pair, conversation = load_sft_records(data)
    assert pair == ("1+1=", "2")
    assert [m["role"] for m in conversation] == ["user", "assistant", "user", "assistant"]
