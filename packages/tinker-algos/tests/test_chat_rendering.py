"""Chat templates, token-in/token-out multi-turn episodes and stopping, with SmolLM2's real BPE
tokenizer and ChatML template (``<|im_start|>``/``<|im_end|>``).

The policies here are either scripted (the test chooses every token the "policy" samples) or a
small random-init Llama with SmolLM2's 49,152-token vocabulary, so the tests are about rendering
and bookkeeping, not about what a trained model says.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tinker_algos.sampling.engine as engine_module
from tinker_algos.model.prompts import PromptRenderer, TemplateError, eos_token_ids
from tinker_algos.model.tokenizer import build_char_tokenizer, load_tokenizer
from tinker_algos.rollout.episodes import rollout
from tinker_algos.sampling.sampler import SampledSequence, SamplingParams, sample
from tinker_core.env import Action, EnvSpec, TextEnv, turn_end_of
from tinker_core.errors import ConfigError

IM_START, IM_END = "<|im_start|>", "<|im_end|>"


@pytest.fixture(scope="session")
def tok(chat_model_dir: Path) -> Any:
    """SmolLM2's tokenizer, loaded as the project loads tokenizers."""
    return load_tokenizer(chat_model_dir)


@pytest.fixture
def chat_policy(chat_model_dir: Path) -> Any:
    from tinker_algos.model.models import PolicyModel

    return PolicyModel.load(chat_model_dir, device="cpu", precision="fp32")


def math_env(env_id: str, **kwargs: Any) -> Any:
    from tinker_core.registry import make_env

    return make_env(env_id, **kwargs)


def chatml(messages: list[dict[str, str]], generation_prompt: bool) -> str:
    """ChatML as SmolLM2's template writes it (its default system message when none is given)."""
    if messages[0]["role"] != "system":
        messages = [{"role": "system", "content": "You are a helpful AI assistant named SmolLM, trained by Hugging Face"}, *messages]
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if generation_prompt else "")


# ---- the reset prompt ---------------------------------------------------------------------------
def test_the_arithmetic_prompt_reaches_a_chat_model_through_its_template(tok, algos_and_math_plugins) -> None:
    renderer = PromptRenderer.from_config(tok, "auto")
    assert renderer.chat and renderer.end_of_turn_id == tok.convert_tokens_to_ids(IM_END)
    env = math_env("math/arithmetic-v0")
    obs, _ = env.reset(seed=3)
    ids, conv = renderer.start(obs)
    assert tok.decode(ids) == chatml([{"role": "user", "content": obs}], True)
    assert ids[0] == tok.convert_tokens_to_ids(IM_START) and ids.count(tok.bos_token_id) == 3  # system, user, assistant
    assert conv.messages == [{"role": "user", "content": obs}]
    # the env spec's system prompt replaces the template's default one
    ids, _ = renderer.start(obs, system_prompt="Reply with the number only.")
    assert tok.decode(ids) == chatml([{"role": "system", "content": "Reply with the number only."}, {"role": "user", "content": obs}], True)


def test_a_rollout_samples_from_the_templated_prompt(chat_policy, algos_and_math_plugins) -> None:
    seen: list[list[int]] = []

    def record(policy, contexts, params, **kw):
        seen.extend(list(c) for c in contexts)
        return sample(policy, contexts, params, **kw)

    env_factory = lambda: math_env("math/arithmetic-v0")  # noqa: E731
    obs = env_factory().reset(seed=11)[0]
    mp = pytest.MonkeyPatch()
    mp.setattr(engine_module, "sample", record)
    try:
        res = rollout(chat_policy, env_factory, [11], SamplingParams(max_new_tokens=4, stop=(), seed=0))
    finally:
        mp.undo()
    system = {"role": "system", "content": env_factory().env_spec.system_prompt}  # the env spec's
    assert chat_policy.tokenizer.decode(seen[0]) == chatml([system, {"role": "user", "content": obs}], True)
    assert res.trajectories[0].tokens_T[: len(seen[0])].tolist() == seen[0]


# ---- a multi-turn calculator episode, token-in token-out ---------------------------------------
class Scripted:
    """A fake ``sample`` whose "policy" writes the given turns: (text, ends with <|im_end|>)."""

    def __init__(self, tok: Any, turns: list[tuple[str, bool]]) -> None:
        self.tok, self.turns, self.contexts, self.sampled = tok, list(turns), [], []

    def __call__(self, policy, contexts, params, **kw):
        assert len(contexts) == 1
        text, eot = self.turns.pop(0)
        ids = self.tok.encode(text, add_special_tokens=False) + ([self.tok.convert_tokens_to_ids(IM_END)] if eot else [])
        self.contexts.append(list(contexts[0]))
        self.sampled.append(ids)
        reason = "eos" if eot else "length"
        return [[SampledSequence(list(contexts[0]), ids, [-0.5] * len(ids), [-0.5] * len(ids), reason, text)]]


class Recording:
    """Wraps an env: keeps how each turn it was given ended."""

    def __init__(self, env: Any) -> None:
        self.env, self.turn_ends, self.actions = env, [], []
        self.env_spec = env.env_spec

    def reset(self, **kw):
        return self.env.reset(**kw)

    def step(self, action):
        self.turn_ends.append(turn_end_of(action))
        self.actions.append(action)
        return self.env.step(action)

    def close(self):
        self.env.close()


def test_multi_turn_calculator_training_tokens_are_exactly_the_sampled_tokens(tok, monkeypatch, algos_and_math_plugins) -> None:
    probe = math_env("math/calculator-v0")
    obs0, info = probe.reset(seed=5)
    expr, answer = info["expression"], info["answer"]
    turns = [("<calc>1+1</calc>", False), (f"<calc>{expr}</calc>", True), (f"<answer>{answer}</answer>", True)]
    script = Scripted(tok, turns)
    monkeypatch.setattr(engine_module, "sample", script)
    envs: list[Recording] = []

    def factory() -> Recording:
        envs.append(Recording(math_env("math/calculator-v0")))
        return envs[-1]

    policy = types.SimpleNamespace(tokenizer=tok, base_model=types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=2048)))
    res = rollout(policy, factory, [5], SamplingParams(max_new_tokens=16, stop=()))  # type: ignore[arg-type]
    ep = res.episodes[0]
    assert ep.error is None and ep.reward == 1.0 and ep.turns == 3
    # stop reasons reach the env; the text it gets has no end-of-turn token
    assert envs[0].turn_ends == ["length", "end_of_turn", "end_of_turn"]
    assert all(isinstance(a, Action) and IM_END not in a for a in envs[0].actions)

    traj = ep.trajectory
    assert traj is not None
    tokens, mask = traj.tokens_T.tolist(), traj.loss_mask_T
    trained = [t for t, m in zip(tokens, mask, strict=True) if m > 0]
    assert trained == [t for s in script.sampled for t in s]  # token-in, token-out
    np.testing.assert_array_equal(traj.sampler_logprobs_T[mask > 0], -0.5)
    # each turn's context is the previous context + what was sampled + the env's delta
    for k in (1, 2):
        prev = script.contexts[k - 1] + script.sampled[k - 1]
        assert script.contexts[k][: len(prev)] == prev
    # the whole episode is the templated conversation: env replies are user turns
    messages = [{"role": "user", "content": obs0}]
    for (text, _), obs in zip(turns[:2], ep.transcript[1:], strict=True):
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": obs[0]}]
    messages.append({"role": "assistant", "content": turns[2][0]})
    assert tok.decode(tokens) + "\n" == chatml(messages, False)
    assert [o for o, _ in ep.transcript[1:]] == ["<result>2</result>\n", f"<result>{answer}</result>\n"]
    # the turn cut off at the token limit got the template's <|im_end|> as a masked env token
    first_delta = script.contexts[1][len(script.contexts[0]) + len(script.sampled[0]) :]
    assert tok.decode(first_delta).startswith(f"{IM_END}\n{IM_START}user\n<result>2</result>")
    second_delta = script.contexts[2][len(script.contexts[1]) + len(script.sampled[1]) :]
    assert tok.decode(second_delta).startswith(f"\n{IM_START}user\n")  # the policy wrote <|im_end|>


def test_sampled_multi_turn_episodes_train_on_the_sampled_tokens(chat_policy, algos_and_math_plugins) -> None:
    samples: list[SampledSequence] = []

    def record(policy, contexts, params, **kw):
        out = sample(policy, contexts, params, **kw)
        samples.extend(o[0] for o in out)
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(engine_module, "sample", record)
    try:
        res = rollout(
            chat_policy, lambda: math_env("math/calculator-v0", max_turns=3), [0, 1],
            SamplingParams(max_new_tokens=6, stop=(), seed=1),
        )
    finally:
        mp.undo()
    tok = chat_policy.tokenizer
    im_end = tok.convert_tokens_to_ids(IM_END)
    assert res.episodes[0].transcript[0][0] != res.episodes[1].transcript[0][0]  # two different problems
    for ep in res.episodes:
        assert ep.error is None and ep.trajectory is not None
        tokens = ep.trajectory.tokens_T.tolist()
        mask = ep.trajectory.loss_mask_T > 0
        mine = [s for s in samples if tokens[: len(s.prompt_tokens)] == s.prompt_tokens]
        assert len(mine) == ep.turns
        assert ep.trajectory.tokens_T[mask].tolist() == [t for s in mine for t in s.tokens]
        np.testing.assert_allclose(ep.trajectory.sampler_logprobs_T[mask], [lp for s in mine for lp in s.logprobs], rtol=1e-6)
        for prev, nxt, (obs, _) in zip(mine, mine[1:], ep.transcript[1:], strict=False):
            assert nxt.prompt_tokens[: len(prev.full_tokens)] == prev.full_tokens  # never re-encoded
            delta = tok.decode(nxt.prompt_tokens[len(prev.full_tokens) :])
            closing = "\n" if prev.tokens[-1] == im_end else f"{IM_END}\n"
            assert delta == f"{closing}{IM_START}user\n{obs}{IM_END}\n{IM_START}assistant\n"


def test_multi_agent_roles_train_on_their_sampled_tokens_with_env_views_as_user_turns(chat_policy) -> None:
    pytest.importorskip("tinker_env_games", reason="the games envs (tinker-env-games, a dev dependency) are not installed")
    from tinker_algos.multiagent import multi_agent_rollout
    from tinker_env_games.tictactoe import TicTacToeEnv

    turn_ends: list[str | None] = []

    class Recording(TicTacToeEnv):
        def step(self, action: str) -> None:
            turn_ends.append(turn_end_of(action))
            super().step(action)

    samples: list[SampledSequence] = []

    def record(policy, contexts, params, **kw):
        out = sample(policy, contexts, params, **kw)
        samples.extend(o[0] for o in out)
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(engine_module, "sample", record)
    try:
        # one episode: episodes of tictactoe all start from the same board, hence the same prompts
        res = multi_agent_rollout(chat_policy, Recording, [0], SamplingParams(max_new_tokens=4, stop=(), seed=0))
    finally:
        mp.undo()
    tok = chat_policy.tokenizer
    assert turn_ends and set(turn_ends) <= {"length", "end_of_turn"}  # what the learners' turns were
    trained = 0
    for ep in res.episodes:
        for traj in ep.trajectories.values():
            tokens = traj.tokens_T.tolist()
            mine = [s for s in samples if tokens[: len(s.prompt_tokens)] == s.prompt_tokens]
            assert traj.tokens_T[traj.loss_mask_T > 0].tolist() == [t for s in mine for t in s.tokens]
            assert tok.decode(mine[0].prompt_tokens).startswith(f"{IM_START}system\n")
            for prev, nxt in zip(mine, mine[1:], strict=False):
                assert nxt.prompt_tokens[: len(prev.full_tokens)] == prev.full_tokens
                assert f"{IM_START}user\n" in tok.decode(nxt.prompt_tokens[len(prev.full_tokens) :])
            assert len(mine) >= 2  # illegal moves are retried: every role takes several turns
            trained += len(mine)
    assert trained == len(turn_ends)


# ---- stopping -------------------------------------------------------------------------------------
def test_eos_ids_are_the_generation_config_the_tokenizer_and_the_template_end_of_turn(chat_policy, tok) -> None:
    im_end = tok.convert_tokens_to_ids(IM_END)
    assert eos_token_ids(tok) == {im_end}
    chat_policy.base_model.generation_config.eos_token_id = [0, 7]
    assert eos_token_ids(tok, chat_policy.base_model, extra=[9]) == {im_end, 0, 7, 9}
    assert eos_token_ids(build_char_tokenizer()) == {2}  # the tiny preset: <eos> only


def test_an_end_of_turn_token_stops_sampling_and_stays_out_of_the_text(chat_policy) -> None:
    import torch

    tok = chat_policy.tokenizer
    hello = tok.encode("Hello", add_special_tokens=False)[0]  # an ordinary (not special) token
    head = chat_policy.model.lm_head
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.weight.copy_(head.weight)
        biased.bias.zero_()
        biased.bias[hello] = 1e4  # greedy and sampled decoding both pick "Hello"
    chat_policy.model.lm_head = biased
    prompt = [[1, 9, 9, 9]]
    free = sample(chat_policy, prompt, SamplingParams(max_new_tokens=2, temperature=0.0))[0][0]
    assert free.tokens == [hello, hello] and free.stop_reason == "length" and free.text == "HelloHello"
    ended = sample(chat_policy, prompt, SamplingParams(max_new_tokens=2, temperature=0.0, eos_token_ids=[hello]))[0][0]
    assert ended.tokens == [hello] and ended.stop_reason == "eos" and ended.text == ""  # kept in tokens, not in text
    chat_policy.base_model.generation_config.eos_token_id = [hello]  # the generation config's eos ids count too
    assert sample(chat_policy, prompt, SamplingParams(max_new_tokens=2))[0][0].stop_reason == "eos"
    chat_policy.base_model.generation_config.eos_token_id = 2
    stopped = sample(chat_policy, prompt, SamplingParams(max_new_tokens=2, stop=["Hello"]))[0][0]
    assert stopped.tokens == [hello] and stopped.stop_reason == "stop_string" and stopped.text == "Hello"


# ---- modes and errors ----------------------------------------------------------------------------
def test_chat_template_none_gives_the_plain_rendering(tok) -> None:
    renderer = PromptRenderer.from_config(tok, "none")
    assert not renderer.chat and renderer.extra_eos_ids == ()
    ids, conv = renderer.start("12+35=", system_prompt="ignored")
    assert ids == tok.encode("12+35=", add_special_tokens=True)
    assert renderer.next(conv, [5, 6], "x", "more") == tok.encode("more", add_special_tokens=False)
    ids, _ = renderer.start([{"role": "user", "content": "hi"}])
    assert tok.decode(ids) == "user: hi\nassistant: "


def test_the_tiny_preset_keeps_its_plain_prompts_under_auto() -> None:
    char = build_char_tokenizer()
    auto = PromptRenderer.from_config(char, "auto")
    assert not auto.chat
    ids, conv = auto.start("12+35=")
    assert ids == char.encode("12+35=", add_special_tokens=True)  # <bos> then the text, as before
    assert auto.next(conv, [5], "47", "next\n") == char.encode("next\n", add_special_tokens=False)
    # asking for its template explicitly wraps text as a user message
    templated = PromptRenderer.from_config(char, "tokenizer")
    assert char.decode(templated.start("12+35=")[0], skip_special_tokens=True) == "user: 12+35=\nassistant: "


def test_a_template_file_is_used(tok, tmp_path) -> None:
    path = tmp_path / "plain-chatml.jinja"
    path.write_text(
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    renderer = PromptRenderer.from_config(tok, str(path))
    ids, _ = renderer.start("2+2=")
    assert tok.decode(ids) == f"{IM_START}user\n2+2={IM_END}\n{IM_START}assistant\n"  # no default system message


def test_bad_chat_template_settings_are_config_errors_naming_the_field(tok, tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"model\.chat_template: '/no/such/template\.jinja' is not 'auto', 'tokenizer', 'none' or an existing file"):
        PromptRenderer.from_config(tok, "/no/such/template.jinja")
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}")
    with pytest.raises(ConfigError, match=r"model\.chat_template: .*broken\.jinja does not render a conversation"):
        PromptRenderer.from_config(tok, str(broken))
    no_template = build_char_tokenizer()
    no_template.chat_template = None
    with pytest.raises(ConfigError, match=r"model\.chat_template: 'tokenizer' asks for the tokenizer's chat template, but this tokenizer has none"):
        PromptRenderer.from_config(no_template, "tokenizer")
    assert not PromptRenderer.from_config(no_template, "auto").chat  # auto: plain text


def test_a_template_that_rewrites_earlier_turns_is_refused(tok, tmp_path) -> None:
    path = tmp_path / "last-only.jinja"  # shows only the last message: not append-only
    path.write_text("{{ messages[-1]['content'] }}{% if add_generation_prompt %}>{% endif %}")
    renderer = PromptRenderer.from_config(tok, str(path))
    _, conv = renderer.start("a")
    with pytest.raises(TemplateError, match="renders earlier turns differently"):
        renderer.next(conv, [5], "b", "c")


def test_a_job_with_a_missing_template_file_fails_before_training(tiny_dir, tmp_path, algos_and_math_plugins) -> None:
    from tinker_algos.run.job import train

    job = {
        "model": {"name": str(tiny_dir), "chat_template": str(tmp_path / "missing.jinja")},
        "algorithm": {"name": "grpo", "steps": 1},
        "env": {"id": "math/arithmetic-v0"},
        "logging": {"tensorboard": False, "plot": False},
    }
    with pytest.raises(ConfigError, match=r"model\.chat_template: '.*missing\.jinja' is not"):
        train(job, run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_opentinker_train_with_a_missing_template_file_exits_2_with_one_line(tiny_dir, tmp_path, monkeypatch) -> None:
    import typer
    from typer.testing import CliRunner

    from tinker_algos import plugin

    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-math")
    cli = typer.Typer(add_completion=False)
    cli.command()(lambda: None)  # keeps `train` a subcommand, as in `opentinker`
    plugin.opentinker_register_commands(cli=cli)
    config = tmp_path / "job.yaml"
    config.write_text(
        f"model: {{name: {tiny_dir}, chat_template: {tmp_path / 'missing.jinja'}}}\n"
        "env: {id: math/arithmetic-v0}\nalgorithm: {name: grpo, steps: 1}\nlogging: {tensorboard: false, plot: false}\n"
    )
    result = CliRunner().invoke(cli, ["train", str(config), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: model.chat_template: ") and "missing.jinja" in lines[0]
    assert "Traceback" not in result.output


# ---- the real model -----------------------------------------------------------------------------
class AskOnce(TextEnv):
    """One question; keeps the action and how the turn ended."""

    env_spec = EnvSpec(id="testing/ask-once-v0")

    def __init__(self) -> None:
        self.seen: list[str] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "What is 86+67? Answer with just the number.", {}

    def step(self, action):
        self.seen.append(action)
        return "", 0.0, True, False, {}


def test_the_real_instruct_model_ends_its_turn_with_im_end_and_the_env_is_told(smollm2_dir) -> None:
    from tinker_algos.model.models import PolicyModel

    policy = PolicyModel.load(smollm2_dir, device="cpu", precision="fp32")
    envs: list[AskOnce] = []
    res = rollout(policy, lambda: envs.append(AskOnce()) or envs[-1], [0], SamplingParams(max_new_tokens=32, temperature=0.0, stop=()))
    traj = res.episodes[0].trajectory
    assert traj is not None and traj.tokens_T[-1] == policy.tokenizer.convert_tokens_to_ids(IM_END)  # sampled, kept
    (action,) = envs[0].seen
    assert turn_end_of(action) == "end_of_turn" and IM_END not in action and action.strip()


# ---- offline data (SFT examples, DPO pairs) -----------------------------------------------------
def test_offline_examples_are_tokenized_as_the_sampler_sees_and_writes_them(tok) -> None:
    from tinker_algos.algorithms.common import example_trajectory

    renderer = PromptRenderer.from_config(tok, "auto")
    traj = example_trajectory(tok, "2+3=", "5", renderer, "Reply with the number only.")
    prompt_ids, _ = renderer.start("2+3=", "Reply with the number only.")
    tokens, mask = traj.tokens_T.tolist(), traj.loss_mask_T.tolist()
    completion = [t for t, m in zip(tokens, mask, strict=True) if m]
    assert tokens[: len(prompt_ids)] == prompt_ids and not any(mask[: len(prompt_ids)])
    # the completion ends its turn as a sampled answer does (the sampler stops at <|im_end|>)
    assert completion == [*tok.encode("5", add_special_tokens=False), tok.convert_tokens_to_ids(IM_END)]
    messages = [{"role": "system", "content": "Reply with the number only."}, {"role": "user", "content": "2+3="}]
    assert tok.decode(tokens) == chatml(messages, True) + "5" + IM_END
    # plain text (the tiny preset, model.chat_template: none) is encoded as before: <bos>, no end of turn
    plain = example_trajectory(tok, "2+3=", "5", PromptRenderer.from_config(tok, "none"))
    expected = [*tok.encode("2+3=", add_special_tokens=True), *tok.encode("5", add_special_tokens=False)]
    assert plain.tokens_T.tolist() == expected == example_trajectory(tok, "2+3=", "5").tokens_T.tolist()


@pytest.mark.parametrize("algorithm", ["sft", "dpo"])
def test_sft_and_dpo_data_reach_a_chat_model_through_its_template(
    algorithm, chat_model_dir, tmp_path, monkeypatch, algos_and_math_plugins
) -> None:
    import json

    from tinker_algos import train
    from tinker_algos.training.trainer import Trainer

    data = tmp_path / "data.jsonl"
    record = {"prompt": "2+3=", "completion": "5"} if algorithm == "sft" else {"prompt": "2+3=", "chosen": "5", "rejected": "6"}
    data.write_text(json.dumps(record) + "\n")
    seen: list[Any] = []
    original = Trainer.forward_backward

    def spy(self: Any, batch: Any, *a: Any, **k: Any) -> Any:
        seen.append(batch)
        return original(self, batch, *a, **k)

    monkeypatch.setattr(Trainer, "forward_backward", spy)
    cfg = {
        "name": f"{algorithm}-chat",
        "model": {"name": str(chat_model_dir), "device": "cpu"},
        "env": {"id": "math/arithmetic-v0"},  # its spec's system prompt: "You are a calculator. ..."
        "lora": {"rank": 2, "alpha": 4},
        "stages": [{"algorithm": {"name": algorithm, "steps": 1, "batch_size": 2, "data": str(data), "eval_size": 1}}],
        "rollout": {"max_new_tokens": 2},
        "logging": {"tensorboard": False, "plot": False},
    }
    assert train(cfg, run_dir=tmp_path / "run").status == "completed"
    from tinker_core.registry import env_spec

    system = env_spec("math/arithmetic-v0").system_prompt
    prompt = chatml([{"role": "system", "content": system}, {"role": "user", "content": "2+3="}], True)
    row = [int(t) for t, m in zip(seen[0].tokens_B_T[0], seen[0].attention_mask_B_T[0], strict=True) if m]
    assert tok_text(chat_model_dir, row) == prompt + "5" + IM_END
    if algorithm == "dpo":
        rejected = [int(t) for t, m in zip(seen[0].tokens_B_T[1], seen[0].attention_mask_B_T[1], strict=True) if m]
        assert tok_text(chat_model_dir, rejected) == prompt + "6" + IM_END


def tok_text(model_dir: Path, ids: list[int]) -> str:
    return load_tokenizer(model_dir).decode(ids)
