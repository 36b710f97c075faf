"""``multi_agent.mode: learners``: one LoRA adapter per role, trained in one job from its own turns.

Tic-tac-toe (tinker-env-games) on the untrained tiny model: its moves are mostly illegal, games end
early, often by forfeit, and rewards differ within a group -- enough for each role to learn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tinker_env_games", reason="these tests play tinker-env-games' tic-tac-toe")

import torch  # noqa: E402

from tinker_algos import train  # noqa: E402
from tinker_algos.algorithms.base import StageContext  # noqa: E402
from tinker_algos.algorithms.grpo import GRPO  # noqa: E402
from tinker_algos.model.models import LoraSpec, PolicyModel  # noqa: E402
from tinker_algos.multiagent.params import role_adapter  # noqa: E402
from tinker_algos.run.job import env_factories, trainer_config  # noqa: E402
from tinker_algos.training.trainer import Trainer  # noqa: E402
from tinker_core.config import parse_config  # noqa: E402
from tinker_core.errors import ConfigError  # noqa: E402

ROLES = ("x", "o")


def learners_config(tiny_dir: Path, *, steps: int = 2, roles: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    multi_agent: dict[str, Any] = {"mode": "learners", "eval_opponent": "random"}
    if roles is not None:
        multi_agent["roles"] = roles
    return {
        "name": "tictactoe-learners",
        "seed": 0,
        "model": {"name": str(tiny_dir), "device": "cpu", "threads": 1},
        "lora": {"rank": 4, "alpha": 8},
        "env": {"id": "games/tictactoe-v0", "kwargs": {"max_illegal_moves": 2}},
        "algorithm": {"name": "grpo", "steps": steps, "eval_size": 4, "params": {"multi_agent": multi_agent}},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 3, "stop": ["\n"], "max_error_rate": 0.5},
        "optimizer": {"lr": 5e-3},
        "checkpoint": {"every": 1, "keep": 3},
        "logging": {"tensorboard": False, "plot": False},
        **extra,
    }


def snapshot(policy: PolicyModel, adapter: str) -> list[torch.Tensor]:
    return [p.detach().clone() for p in policy.adapter_parameters(adapter)]


def changed(policy: PolicyModel, adapter: str, before: list[torch.Tensor]) -> bool:
    return any(not torch.equal(p, b) for p, b in zip(policy.adapter_parameters(adapter), before, strict=True))


def test_two_learner_roles_train_from_the_job_config(tiny_dir: Path, tmp_path: Path) -> None:
    """The acceptance test of issue 28: a job config with two learner roles (one with its own lr
    and loss) trains, logs per role and per seat, evaluates each role's adapter in its own seat,
    and checkpoints one adapter per role that eval/export read like any checkpoint."""
    from peft import PeftConfig

    roles = {"x": {"lr": 1e-2, "optimizer": "sgd", "optimizer_params": {"momentum": 0.9}}, "o": {"loss": "ppo", "loss_config": {"eps_low": 0.2}}}
    cfg = learners_config(tiny_dir, roles=roles)
    result = train(cfg, run_dir=tmp_path / "run")
    assert result.status == "completed" and result.step == 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for role in ROLES:
            for key in ("losses/policy", "optim/grad_norm", "optim/lr"):
                assert np.isfinite(r[f"roles/{role}/{key}"]), (role, key)
        assert r["roles/x/optim/lr"] == pytest.approx(1e-2) and r["roles/o/optim/lr"] == pytest.approx(5e-3)
        assert "roles/o/losses/clipfrac" in r and "roles/x/losses/clipfrac" not in r  # o trains with ppo's loss
        assert r["losses/policy"] == pytest.approx((r["roles/x/losses/policy"] + r["roles/o/losses/policy"]) / 2)
        for seat in (1, 2):  # self-play of learners: both seats are learners
            assert r[f"env/seat{seat}/win_rate"] + r[f"env/seat{seat}/draw_rate"] + r[f"env/seat{seat}/loss_rate"] == pytest.approx(1.0)
    last = rows[-1]
    for name in (*ROLES, "seat1", "seat2"):
        rates = [last[f"eval/{name}/{what}_rate"] for what in ("win", "draw", "loss")]
        assert sum(rates) == pytest.approx(1.0), name
    from tinker_algos.records.metrics import curve_panels

    assert ("held-out win rate by seat", ["eval/seat1/win_rate", "eval/seat2/win_rate"], "linear") in curve_panels(rows)
    # x always moves first in tic-tac-toe: its seat is seat 1
    assert last["eval/x/win_rate"] == last["eval/seat1/win_rate"] and last["eval/o/loss_rate"] == last["eval/seat2/loss_rate"]
    ckpt = tmp_path / "run" / "checkpoints" / "step-000002"
    for role in ROLES:
        assert PeftConfig.from_pretrained(str(ckpt / "roles" / role / "adapter")).r == 4
    # x's own optimizer is SGD with momentum, o keeps the stage's AdamW
    states = {role: torch.load(ckpt / "roles" / role / "trainer_state.pt", weights_only=False)["optimizer"] for role in ROLES}
    x_state, o_state = (next(iter(states[r]["state"].values())) for r in ("x", "o"))
    assert "momentum_buffer" in x_state and "exp_avg" not in x_state and "exp_avg" in o_state
    assert states["x"]["param_groups"][0]["momentum"] == 0.9
    from tinker_algos.commands.evaluation import find_source
    from tinker_algos.commands.export import export

    source = find_source(ckpt / "roles" / "o")
    assert source.kind == "checkpoint"
    out = export(ckpt / "roles" / "o", tmp_path / "o-export", base_model="org/tiny-base")  # the tiny dir is no portable name
    assert (Path(out.output) / "adapter_model.safetensors").is_file()


def test_learners_resume_exactly_as_if_never_stopped(tiny_dir: Path, tmp_path: Path, stop_after: Any, deterministic_metrics: Any) -> None:
    cfg = learners_config(tiny_dir, steps=3)
    full = train(cfg, run_dir=tmp_path / "full")
    part = train(cfg, run_dir=tmp_path / "part", callbacks=stop_after(1))
    assert part.status == "interrupted" and part.step == 1
    rest = train(cfg, run_dir=tmp_path / "part", callbacks=stop_after(10**9))
    assert rest.status == "completed" and rest.step == full.step == 3
    assert deterministic_metrics(tmp_path / "part") == deterministic_metrics(tmp_path / "full")
    for role in ROLES:  # the adapters themselves, not just the metrics
        a = (tmp_path / "full" / "checkpoints" / "step-000003" / "roles" / role / "adapter" / "adapter_model.safetensors").read_bytes()
        b = (tmp_path / "part" / "checkpoints" / "step-000003" / "roles" / role / "adapter" / "adapter_model.safetensors").read_bytes()
        assert a == b, role


def grpo_stage(tiny_dir: Path, tmp_path: Path, *, warm_start: bool = False) -> GRPO:
    """The GRPO stage of :func:`learners_config`, built as the run builds it; with ``warm_start``
    the job's adapter holds trained-looking (random, nonzero) weights when the stage starts."""
    job = parse_config(learners_config(tiny_dir))
    stage = job.resolved_stages()[0]
    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    trainer = Trainer(policy, trainer_config(stage), adapter="policy", lora=LoraSpec(rank=4, alpha=8), adapter_seed=0)
    if warm_start:
        generator = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for p in policy.adapter_parameters("policy"):
                p.copy_(torch.randn(p.shape, generator=generator) * 0.05)
    env_factory, eval_factory = env_factories(stage.env)
    ctx = StageContext(job, stage, 0, policy, trainer, tmp_path, "policy", env_factory, eval_factory, lambda line: None)
    return GRPO(ctx)


def test_each_adapter_changes_only_from_its_own_roles_tokens(tiny_dir: Path, tmp_path: Path) -> None:
    algo = grpo_stage(tiny_dir, tmp_path)
    policy = algo.ctx.policy
    assert algo.learners is not None
    adapters = algo.learners.adapters
    assert adapters == {r: role_adapter("policy", r) for r in ROLES} == {"x": "policy-x", "o": "policy-o"}
    result = algo.collect(0)
    for role in ROLES:  # both roles acted, and their groups' rewards differ: each has advantage to learn from
        trajs = result.for_role(role).trajectories
        assert trajs and {t.info["adapter"] for t in trajs} == {adapters[role]}
    base = [p.detach().clone() for n, p in policy.module.named_parameters() if "lora_" not in n]
    for role in ROLES:
        other = "o" if role == "x" else "x"
        before = {r: snapshot(policy, a) for r, a in adapters.items()}
        metrics = algo.learn(result.for_role(role), algo.learners.by_role[role].update)
        assert metrics["optim/grad_norm"] > 0, role
        assert changed(policy, adapters[role], before[role]), f"{role}'s adapter did not learn from its own turns"
        assert not changed(policy, adapters[other], before[other]), f"{other}'s adapter moved with {role}'s tokens"
        assert all(p.grad is None for p in policy.adapter_parameters(adapters[other]))
        assert not changed(policy, "policy", snapshot(policy, "policy"))
    # the base weights never move (LoRA), and the job's own adapter stays untrained in this mode
    assert all(torch.equal(p, b) for p, b in zip((p for n, p in policy.module.named_parameters() if "lora_" not in n), base, strict=True))
    assert all(float(p.abs().sum()) == 0 for n, p in policy.module.named_parameters() if "lora_B.policy." in n)


def test_every_role_starts_from_the_job_adapter_as_the_stage_finds_it(tiny_dir: Path, tmp_path: Path) -> None:
    """A warm start before a learners stage (an SFT stage training the job's adapter) carries over:
    each role's adapter starts as a copy of the job's, then moves on its own."""
    algo = grpo_stage(tiny_dir, tmp_path, warm_start=True)
    policy = algo.ctx.policy
    assert algo.learners is not None
    job = snapshot(policy, "policy")
    assert any(float(p.abs().sum()) > 0 for p in job if p.ndim)  # trained-looking: B is not zero
    for role, adapter in algo.learners.adapters.items():
        assert all(torch.equal(p, q) for p, q in zip(snapshot(policy, adapter), job, strict=True)), role
    result = algo.collect(0)
    algo.learn(result.for_role("x"), algo.learners.by_role["x"].update)
    assert changed(policy, "policy-x", job) and not changed(policy, "policy-o", job)


def test_a_role_with_no_advantage_leaves_its_adapter_unchanged(tiny_dir: Path, tmp_path: Path) -> None:
    """Only x's turns carry advantage (o's rewards tied within every group): after a whole
    learners step, x's adapter moved and o's did not."""
    algo = grpo_stage(tiny_dir, tmp_path)
    policy, adapters = algo.ctx.policy, algo.learners.adapters  # type: ignore[union-attr]
    result = algo.collect(0)
    for ep in result.episodes:
        if "o" in ep.trajectories:
            t = ep.trajectories["o"]
            t.turn_rewards = [0.0] * len(t.turn_rewards)
    before = {r: snapshot(policy, a) for r, a in adapters.items()}
    metrics = algo.learners.learn(result, algo.learn)  # type: ignore[union-attr]
    assert metrics["roles/o/optim/grad_norm"] == 0.0 and metrics["roles/x/optim/grad_norm"] > 0
    assert changed(policy, adapters["x"], before["x"])
    assert not changed(policy, adapters["o"], before["o"])


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"roles": {"x": {}, "z": {}}}, "algorithm.params.multi_agent.roles.z: not a role of games/tictactoe-v0 (its roles: x, o)"),
        ({"roles": {"x": {}}}, "algorithm.params.multi_agent.roles: o of games/tictactoe-v0 missing"),
        ({"lora": None}, "algorithm.params.multi_agent.mode: learners trains one LoRA adapter per role"),
        ({"roles": {"x": {"loss": "dpo"}, "o": {}}}, "algorithm.params.multi_agent.roles.x.loss: grpo needs a policy loss"),
    ],
)
def test_bad_learner_configs_fail_naming_the_field_and_the_fix(tiny_dir: Path, tmp_path: Path, change: dict[str, Any], fragment: str) -> None:
    cfg = learners_config(tiny_dir)
    if "lora" in change:
        cfg["lora"] = change["lora"]
    else:
        cfg["algorithm"]["params"]["multi_agent"].update(change)
    with pytest.raises(ConfigError) as e:
        train(cfg, run_dir=tmp_path / "run")
    assert fragment in str(e.value)


def test_learners_mode_on_an_env_without_roles_is_refused(tiny_dir: Path, tmp_path: Path) -> None:
    cfg = learners_config(tiny_dir)
    cfg["env"] = {"id": "echo/echo-v0"}
    with pytest.raises(ConfigError, match=r"params.multi_agent: the env 'echo/echo-v0' is single-agent .*remove multi_agent"):
        train(cfg, run_dir=tmp_path / "run")


def test_a_roles_own_optimizer_starts_from_its_own_settings() -> None:
    from tinker_algos.algorithms.learners import role_trainer_config
    from tinker_algos.training.trainer_config import TrainerConfig
    from tinker_core.config import RoleLearnerConfig

    stage = TrainerConfig(optimizer="adamw", lr=1e-3, optimizer_config={"betas": [0.9, 0.95]})
    same = role_trainer_config(stage, RoleLearnerConfig(lr=2e-3))
    assert (same.optimizer, same.lr, same.optimizer_config) == ("adamw", 2e-3, {"betas": [0.9, 0.95]})
    other = role_trainer_config(stage, RoleLearnerConfig(optimizer="sgd"))
    assert (other.optimizer, other.lr, other.optimizer_config) == ("sgd", 1e-3, {})  # AdamW's betas mean nothing to SGD
    own = role_trainer_config(stage, RoleLearnerConfig(optimizer="sgd", optimizer_params={"momentum": 0.5}))
    assert own.optimizer_config == {"momentum": 0.5} and stage.optimizer_config == {"betas": [0.9, 0.95]}


def opentinker(*args: object) -> Any:
    """``opentinker ARGS`` (tinker-algos' commands) through typer's runner."""
    import typer
    from typer.testing import CliRunner

    from tinker_algos import plugin

    app = typer.Typer(add_completion=False)
    plugin.opentinker_register_commands(cli=app)
    return CliRunner().invoke(app, [str(a) for a in args])


def test_opentinker_eval_of_a_learners_run_replays_its_held_out_games(tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``opentinker eval`` on a multi-agent game: each role's own adapter (as checkpointed) in its own
    seat against the run's eval opponent, the same greedy games its training evaluated last (the
    same metrics)."""
    from safetensors.torch import load_file

    from tinker_algos.multiagent import grpo

    cfg = learners_config(tiny_dir, steps=2)
    cfg["algorithm"]["eval_every"] = 2
    assert train(cfg, run_dir=tmp_path / "run").status == "completed"
    last = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    played: dict[str, dict[str, torch.Tensor]] = {}
    original = grpo.evaluate_multi_agent

    def spy(policy: PolicyModel, *a: Any, adapters: dict[str, str] | None = None, **k: Any) -> dict[str, float]:
        for role, name in (adapters or {}).items():
            played[role] = {n: p.detach().clone() for n, p in policy.model.named_parameters() if f".{name}." in n}
        return original(policy, *a, adapters=adapters, **k)

    monkeypatch.setattr(grpo, "evaluate_multi_agent", spy)
    result = opentinker("eval", tmp_path / "run", "-o", tmp_path / "eval.json")
    ckpt = tmp_path / "run" / "checkpoints" / "step-000002"
    for role in ROLES:  # the role's own checkpointed weights played its seat
        saved = load_file(str(ckpt / "roles" / role / "adapter" / "adapter_model.safetensors"))
        assert sorted(t.sum().item() for t in played[role].values()) == pytest.approx(sorted(t.sum().item() for t in saved.values()))
    assert not all(torch.equal(a, b) for a, b in zip(played["x"].values(), played["o"].values(), strict=True))
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["opponent"] == "random" and report["step"] == 2 and report["n"] == 4
    held_out = {k: v for k, v in report["metrics"].items() if k != "eval/n"}
    assert held_out == {k: last[k] for k in held_out}
    assert {"eval/x/win_rate", "eval/o/loss_rate", "eval/seat1/win_rate", "eval/seat2/draw_rate"} <= set(held_out)
    assert "against random" in result.output and "win" in result.output
    # another opponent is another evaluation: minimax never loses
    assert opentinker("eval", tmp_path / "run", "--opponent", "minimax", "-o", tmp_path / "m.json").exit_code == 0
    assert json.loads((tmp_path / "m.json").read_text())["metrics"]["eval/win_rate"] == 0.0


def test_opentinker_eval_of_a_learners_config_is_its_untrained_start(tiny_dir: Path, tmp_path: Path) -> None:
    """A job config source: the base model in every seat, on the run's fixed eval seeds, as
    :func:`evaluate_multi_agent` plays it (the start of a learners job's held-out curve)."""
    import yaml

    import tinker_core
    from tinker_algos.multiagent.grpo import evaluate_multi_agent
    from tinker_core.seeding import derive_seed

    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(learners_config(tiny_dir)))
    assert opentinker("eval", config, "-o", tmp_path / "start.json").exit_code == 0
    report = json.loads((tmp_path / "start.json").read_text())
    policy = PolicyModel.load(str(tiny_dir))
    policy.model.eval()
    direct = evaluate_multi_agent(policy, lambda: tinker_core.make_env("games/tictactoe-v0", max_illegal_moves=2), 4,
                                  seed=derive_seed(0, "eval"), max_new_tokens=3, stop=["\n"], opponent_name="random")
    assert report["metrics"] == {**direct, "eval/n": 4.0}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--opponent", "perfect"], "--opponent 'perfect': env 'games/tictactoe-v0' offers the scripted opponents ['minimax', 'mixed', 'random']"),
        (["--samples", "4"], "--samples 4: a multi-agent game is played greedily"),
        (["--env", "echo/echo-v0", "--opponent", "random"], "--opponent applies to a multi-agent game; env 'echo/echo-v0' has no roles"),
    ],
)
def test_opentinker_eval_names_what_a_multi_agent_game_cannot_take(tiny_dir: Path, tmp_path: Path, args: list[str], fragment: str) -> None:
    import yaml

    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(learners_config(tiny_dir)))
    result = opentinker("eval", config, *args)
    assert result.exit_code == 2 and fragment in result.stderr, result.output
