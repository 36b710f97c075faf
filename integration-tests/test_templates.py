"""The cookiecutter templates, tested by what they generate (the cookiecutter-uv habit).

Every template is baked with named option combinations by the ``opentinker`` command of a
tinker-client *wheel* (so the templates are proven to ship inside the distribution), then:

1. the generated packages are installed, next to the workspace's packages, into fresh virtual
   environments: the environments into a light one without tinker-algos (so an env package is
   proven to need no torch), everything into a full one;
2. each generated package's own tests run with pytest inside its environment (they use
   ``tinker_core.testing``: ``check_env``, ``check_advantage_estimator``, ...);
3. ``opentinker plugins --json`` lists each generated distribution and what it registers;
4. a 2-step job trains with each: the envs in GRPO, the estimators / optimizers / losses in
   GRPO, PPO (the critic estimator) or SFT (the supervised loss) on a probe env whose reward
   varies even for an untrained model (so advantages and gradients are not all zero). A probe
   wrapped around the generated function proves the job really called it.

The command's bad input (unknown kind, bad name, unknown option) is tested in-process at the end.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"


@dataclass(frozen=True)
class Combo:
    """A named option combination of one template, and what baking it must give."""

    id: str
    kind: str
    name: str
    options: dict[str, str]
    project: str  # the distribution name
    registers: dict[str, list[str]]
    job: dict[str, Any]  # the config of a 2-step job that uses the plugin
    probe: tuple[str, str] | None = None  # (module, attribute) the job must call
    needs_algos: bool = True
    tags: tuple[str, ...] = field(default=())


def _job(**sections: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "seed": 0,
        "model": {"name": "tiny"},
        "env": {"id": "probe/letters-v0"},  # registered by the DRIVER below
        "algorithm": {"name": "grpo", "steps": 2, "eval_size": 4},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6},
        "optimizer": {"name": "adamw", "lr": 1e-3},
        "logging": {"tensorboard": False, "plot": False},
    }
    for key, value in sections.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


COMBOS = [
    Combo("env-single-turn", "env", "word-count", {}, "tinker-env-word-count",
          {"envs": ["word-count/main-v0"]}, _job(env={"id": "word-count/main-v0"}), needs_algos=False),
    Combo("env-multi-turn", "env", "spell-it", {"env_type": "multi-turn", "task": "spell"}, "tinker-env-spell-it",
          {"envs": ["spell-it/spell-v0"]}, _job(env={"id": "spell-it/spell-v0"}, rollout={"max_turns": 3}),
          needs_algos=False),
    Combo("env-multi-agent", "env", "nim_game", {"env_type": "multi-agent"}, "tinker-env-nim-game",
          {"envs": ["nim-game/main-solo-v0", "nim-game/main-v0"]}, _job(env={"id": "nim-game/main-solo-v0"}),
          needs_algos=False),
    Combo("estimator-group", "advantage-estimator", "group-baseline", {}, "tinker-estimator-group-baseline",
          {"advantage_estimators": ["group_baseline"]},
          _job(algorithm={"estimator": "group_baseline", "params": {"estimator_config": {"normalize": True}}}),
          probe=("tinker_estimator_group_baseline.estimator", "estimate")),
    Combo("estimator-critic", "advantage-estimator", "critic-baseline", {"needs_critic": "yes"},
          "tinker-estimator-critic-baseline", {"advantage_estimators": ["critic_baseline"]},
          _job(algorithm={"name": "ppo", "estimator": "critic_baseline"}),
          probe=("tinker_estimator_critic_baseline.estimator", "estimate"), tags=("ppo",)),
    Combo("optimizer-from-scratch", "optimizer", "heavy-ball", {}, "tinker-optimizer-heavy-ball",
          {"optimizers": ["heavy_ball"]}, _job(optimizer={"name": "heavy_ball", "lr": 0.01, "params": {"momentum": 0.9}}),
          probe=("tinker_optimizer_heavy_ball.optimizer", "build")),
    Combo("optimizer-wrap-torch", "optimizer", "adamw-nd", {"implementation": "wrap-torch"}, "tinker-optimizer-adamw-nd",
          {"optimizers": ["adamw_nd"]}, _job(optimizer={"name": "adamw_nd", "weight_decay": 0.1}),
          probe=("tinker_optimizer_adamw_nd.optimizer", "build")),
    Combo("loss-policy", "loss", "capped-pg", {}, "tinker-loss-capped-pg", {"losses": ["capped_pg"]},
          _job(algorithm={"loss": "capped_pg", "loss_config": {"cap": 2.0}}), probe=("tinker_loss_capped_pg.loss", "loss")),
    Combo("loss-supervised", "loss", "focal-nll", {"loss_kind": "supervised"}, "tinker-loss-focal-nll",
          {"losses": ["focal_nll"]},
          _job(algorithm={"name": "sft", "steps": 2, "batch_size": 4, "eval_size": 4, "loss": "focal_nll", "loss_config": {"gamma": 2.0}}),
          probe=("tinker_loss_focal_nll.loss", "loss")),
]
BY_ID = {c.id: c for c in COMBOS}
ENV_COMBOS = [c for c in COMBOS if not c.needs_algos]


# ---- running things in the fresh environments --------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for subprocesses: no workspace venv, no plugin switches, 1 torch thread.

    Bytecode writing stays on, so the fresh venvs import torch fast after the first time.
    """
    drop = {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
            "OPENTINKER_LOAD_PLUGINS", "OPENTINKER_DISABLE_PLUGIN_AUTOLOAD"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    env.update(extra)
    return env


def run(args: list[str | Path], *, cwd: Path | None = None, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=clean_env(**env), capture_output=True,
                            text=True, timeout=timeout)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} exited {result.returncode}\n--- stdout\n{result.stdout[-4000:]}"
                    f"\n--- stderr\n{result.stderr[-4000:]}", pytrace=False)
    return result


@dataclass
class Venv:
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def install(self, uv: str, *requirements: str | Path) -> None:
        # byte-compiled at install, as pip does by default: the template files too, which the
        # post-gen hook must then keep out of the generated projects; imports get fast
        run([uv, "pip", "install", "-q", "--compile-bytecode", "--python", self.python, *requirements])

    def opentinker(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return run([self.path / "bin" / "opentinker", *args])


def make_venv(uv: str, path: Path) -> Venv:
    run([uv, "venv", "-q", "--python", sys.executable, path])
    return Venv(path)


@pytest.fixture(scope="module")
def uv() -> str:
    found = shutil.which("uv")
    if found is None:
        pytest.skip("uv is not on PATH; the README's set-up installs it")
    return found


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("templates")


@pytest.fixture(scope="module")
def light(uv: str, work: Path) -> Venv:
    """tinker-core (editable) and the tinker-client *wheel*, no tinker-algos: the baking venv."""
    wheels = work / "wheels"
    run([uv, "build", "-q", "--wheel", "--out-dir", wheels, PACKAGES / "tinker-client"])
    (wheel,) = wheels.glob("tinker_client-*.whl")
    venv = make_venv(uv, work / "light")
    venv.install(uv, "-e", PACKAGES / "tinker-core", wheel, "pytest")
    return venv


@pytest.fixture(scope="module")
def baked(light: Venv, work: Path) -> dict[str, Path]:
    """Every combination rendered by `opentinker new` from the installed wheel."""
    out = work / "baked"
    projects = {}
    for combo in COMBOS:
        options = [a for k, v in combo.options.items() for a in ("--option", f"{k}={v}")]
        result = light.opentinker("new", combo.kind, "--name", combo.name, "--output", out, "--no-input", *options)
        projects[combo.id] = out / combo.project
        assert f"created {projects[combo.id]}" in result.stdout
    return projects


@pytest.fixture(scope="module")
def light_with_envs(uv: str, light: Venv, baked: dict[str, Path]) -> Venv:
    light.install(uv, "-e", PACKAGES / "tinker-core", *(a for c in ENV_COMBOS for a in ("-e", baked[c.id])))
    return light


@pytest.fixture(scope="module")
def full(uv: str, work: Path, baked: dict[str, Path]) -> Venv:
    """The workspace's packages (editable) and every generated package: where jobs train."""
    venv = make_venv(uv, work / "full")
    workspace = ["tinker-core", "tinker-client", "tinker-algos"]
    venv.install(uv, *(a for p in workspace for a in ("-e", PACKAGES / p)), "pytest",
                 *(a for c in COMBOS for a in ("-e", baked[c.id])))
    return venv


def venv_of(combo: Combo, request: pytest.FixtureRequest) -> Venv:
    return request.getfixturevalue("full" if combo.needs_algos else "light_with_envs")


# ---- baking -----------------------------------------------------------------------------------


def test_the_post_gen_hook_keeps_only_the_chosen_variant(baked):
    for combo in COMBOS:
        project = baked[combo.id]
        assert not (project / "_variants").exists(), combo.id
        module = combo.project.replace("-", "_")
        files = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file())
        edited = {"env": "env.py", "advantage-estimator": "estimator.py", "optimizer": "optimizer.py", "loss": "loss.py"}
        assert f"src/{module}/{edited[combo.kind]}" in files, (combo.id, files)
        assert {"pyproject.toml", "README.md", f"src/{module}/plugin.py"} <= set(files)
        assert any(f.startswith("tests/test_") for f in files)
        assert not list(project.rglob("__pycache__")), f"{combo.id}: byte-compiled template files were copied"
        assert "{{" not in "".join(project.joinpath(f).read_text() for f in files), f"{combo.id}: unrendered Jinja"
    multi_agent = (baked["env-multi-agent"] / "src/tinker_env_nim_game/env.py").read_text()
    assert "class NimGameGame(MultiAgentTextEnv)" in multi_agent and "class NimGameSoloEnv(TextEnv)" in multi_agent


def test_generated_packages_depend_on_released_versions_not_workspace_paths(baked):
    import tomllib

    import tinker_core
    from tinker_client.new import tinker_version_range

    expected = f"tinker-core{tinker_version_range(tinker_core.__version__)}"
    for combo in COMBOS:
        meta = tomllib.loads((baked[combo.id] / "pyproject.toml").read_text())
        project = meta["project"]
        assert project["name"] == combo.project
        assert expected in project["dependencies"]
        assert ("torch>=2.6" in project["dependencies"]) == (combo.kind in ("optimizer", "loss"))
        assert project["entry-points"]["opentinker"] == {combo.name.replace("_", "-"): f"{combo.project.replace('-', '_')}.plugin"}
        assert "tool" not in meta or "uv" not in meta["tool"], "no workspace sources in a publishable package"


def test_the_generated_readme_names_the_one_file_to_edit(baked):
    readme = (baked["env-single-turn"] / "README.md").read_text()
    assert "## The one thing to edit" in readme and "src/tinker_env_word_count/env.py" in readme
    assert "word-count/main-v0" in readme


# ---- the generated packages' own tests --------------------------------------------------------


@pytest.mark.parametrize("combo_id", [c.id for c in COMBOS])
def test_the_generated_package_passes_its_own_tests(combo_id, baked, request):
    combo = BY_ID[combo_id]
    venv = venv_of(combo, request)
    result = run([venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=baked[combo_id])
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout


def test_environment_packages_need_no_torch(light_with_envs):
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"
    run([light_with_envs.python, "-c", code])


# ---- opentinker plugins --json ----------------------------------------------------------------


@pytest.fixture(scope="module")
def listed(request) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for fixture in ("light_with_envs", "full"):
        venv = request.getfixturevalue(fixture)
        for plugin in json.loads(venv.opentinker("plugins", "--json").stdout):
            out[f"{fixture}:{plugin['distribution']}"] = plugin
    return out


@pytest.mark.parametrize("combo_id", [c.id for c in COMBOS])
def test_opentinker_plugins_lists_the_generated_package(combo_id, listed):
    combo = BY_ID[combo_id]
    venvs = ["full"] if combo.needs_algos else ["light_with_envs", "full"]
    for venv in venvs:
        plugin = listed[f"{venv}:{combo.project}"]
        assert plugin["version"] == "0.1.0"
        assert plugin["registers"] == combo.registers


# ---- a tiny job with each ---------------------------------------------------------------------

DRIVER = textwrap.dedent('''
    """Run the jobs of a JSON file with tinker_algos.train, counting calls into the plugins."""
    import functools, importlib, json, math, sys, traceback

    jobs = json.loads(open(sys.argv[1]).read())
    calls = {}
    for job in jobs:  # wrap before the first registry read, which is when the hooks run
        if job["probe"]:
            module = importlib.import_module(job["probe"][0])
            original = getattr(module, job["probe"][1])
            calls[job["id"]] = 0

            def counting(*args, _original=original, _id=job["id"], **kwargs):
                calls[_id] += 1
                return _original(*args, **kwargs)

            setattr(module, job["probe"][1], functools.wraps(original)(counting))

    from tinker_core import EnvSpec, TextEnv, hookimpl
    from tinker_core.registry import register_plugin

    class LettersEnv(TextEnv):
        """Reward: the share of lower-case letters in the answer, which varies from the first step."""

        env_spec = EnvSpec(id="probe/letters-v0", description="share of a-z in the answer", max_turns=1)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return "Write a word:\\n", {"target": "hello\\n"}

        def step(self, action):
            text = action.strip()
            return "", sum("a" <= c <= "z" for c in text) / max(len(text), 1), True, False, {}

    class Probe:
        @hookimpl
        def opentinker_register_envs(self, register):
            register(LettersEnv.env_spec, LettersEnv)

    register_plugin(Probe(), distribution="probe")

    import torch
    torch.set_num_threads(1)
    from tinker_algos import train
    from tinker_algos.algorithms import _MODULES

    results = {}
    for job in jobs:
        algorithm = job["config"]["algorithm"]["name"]
        try:
            importlib.import_module(_MODULES[algorithm].split(":")[0])
        except (KeyError, ImportError) as e:
            results[job["id"]] = {"skipped": f"algorithm {algorithm!r} is not in this tinker-algos ({e})"}
            continue
        try:
            r = train(job["config"], run_dir=job["run_dir"])
            results[job["id"]] = {"status": r.status, "step": r.step, "metrics": r.metrics, "calls": calls.get(job["id"])}
        except Exception:
            results[job["id"]] = {"error": traceback.format_exc()}
    open(sys.argv[2], "w").write(json.dumps(results, default=float))
''')


@pytest.fixture(scope="module")
def trained(full: Venv, work: Path) -> dict[str, dict[str, Any]]:
    """One process trains every job (one torch import), writing a result per job."""
    jobs = [
        {"id": c.id, "config": {**c.job, "name": c.id}, "run_dir": str(work / "runs" / c.id), "probe": c.probe}
        for c in COMBOS
    ]
    (work / "jobs.json").write_text(json.dumps(jobs))
    (work / "driver.py").write_text(DRIVER)
    run([full.python, work / "driver.py", work / "jobs.json", work / "results.json"], timeout=900)
    return json.loads((work / "results.json").read_text())


@pytest.mark.parametrize("combo_id", [c.id for c in COMBOS])
def test_a_tiny_job_trains_with_the_generated_plugin(combo_id, trained):
    combo = BY_ID[combo_id]
    result = trained[combo_id]
    if "skipped" in result:
        pytest.skip(result["skipped"])
    assert "error" not in result, result.get("error")
    assert (result["status"], result["step"]) == ("completed", 2)
    metrics = result["metrics"]
    assert math.isfinite(metrics["losses/total"]), metrics
    if combo.probe:
        assert result["calls"] and result["calls"] > 0, f"{combo.probe} was never called"
    if combo.kind == "env":
        assert metrics["rollout/episodes"] == 8 and metrics["rollout/error_rate"] == 0.0, metrics
    else:  # the probe env's rewards vary: the plugin saw real advantages and gradients
        assert metrics["optim/grad_norm"] > 0, metrics
    if combo.id == "estimator-group":
        assert metrics["advantages/advantage_abs_mean"] > 0, metrics
    if combo.id == "loss-policy":
        assert "losses/ratio_mean" in metrics  # the loss's own metrics: losses/<metric> (docs/changelog.md)


# ---- the command's bad input ------------------------------------------------------------------


def invoke(*args: str) -> Any:
    from typer.testing import CliRunner

    from tinker_client.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["new", "envv", "--name", "x"], "unknown template kind 'envv'; did you mean 'env'?"),
        (["new", "env", "--name", "Word Count"], "bad name 'Word Count'"),
        (["new", "env", "--name", "9lives"], "bad name '9lives'"),
        (["new", "env", "--name", "tinker-env-foo"], "give the short name without 'tinker-'"),
        (["new", "env"], "--name is required"),
        (["new", "env", "--name", "ok", "--option", "env_typ=multi-turn"], "unknown option 'env_typ' for template 'env'; did you mean 'env_type'?"),
        (["new", "env", "--name", "ok", "--option", "env_type=multi-turns"], "option env_type='multi-turns' is not one of"),
        (["new", "loss", "--name", "ok", "--option", "loss_kind"], "--option 'loss_kind' is not of the form key=value"),
        (["new", "loss", "--name", "ok", "--option", "name=other"], "--option name=... is not allowed"),
    ],
)
def test_bad_input_exits_2_with_a_one_line_reason(args, reason, tmp_path):
    result = invoke(*args, "--output", str(tmp_path), "--no-input")
    assert result.exit_code == 2, result.output
    first, *rest = result.stderr.strip().splitlines()
    assert first.startswith("error: ") and reason in first, result.stderr
    assert all(line.startswith("hint: ") for line in rest), result.stderr
    assert not any(tmp_path.iterdir()), "nothing is written on bad input"


def test_an_existing_project_is_not_overwritten(tmp_path):
    assert invoke("new", "optimizer", "--name", "twice", "--output", str(tmp_path), "--no-input").exit_code == 0
    (tmp_path / "tinker-optimizer-twice" / "README.md").write_text("mine")
    result = invoke("new", "optimizer", "--name", "twice", "--output", str(tmp_path), "--no-input")
    assert result.exit_code == 2 and "already exists" in result.stderr
    assert (tmp_path / "tinker-optimizer-twice" / "README.md").read_text() == "mine"


def test_the_template_checks_refuse_a_bad_answer(tmp_path):
    result = invoke("new", "env", "--name", "ok", "--option", "task=Main-v1", "--output", str(tmp_path), "--no-input")
    assert result.exit_code == 2 and "the template refused the answers" in result.stderr
    assert not any(tmp_path.iterdir())


def test_names_and_version_ranges():
    import tinker_core
    from tinker_client.new import (
        KINDS,
        TEMPLATES_DIR,
        normalize_name,
        template_options,
        tinker_version_range,
    )

    assert normalize_name("word_count") == "word-count"
    assert tinker_version_range("0.1.0") == ">=0.1,<0.2"
    assert tinker_version_range("1.4.2") == ">=1.4,<2"
    assert sorted(p.name for p in TEMPLATES_DIR.iterdir() if p.is_dir()) == sorted(KINDS)
    for kind in KINDS:  # plain `cookiecutter <template>` gets the same range as `opentinker new`
        default = json.loads((TEMPLATES_DIR / kind / "cookiecutter.json").read_text())["__tinker_range"]
        assert default == tinker_version_range(tinker_core.__version__), kind
        assert "name" not in template_options(kind)
    assert template_options("env")["env_type"] == ["single-turn", "multi-turn", "multi-agent"]


def test_templates_and_env_plugins_import_only_the_plugin_author_surface_of_tinker_core():
    """``from tinker_core import ...`` names only what ``tinker_core.__all__`` offers plugin authors;
    everything else comes from its submodule."""
    import re

    import tinker_core

    sources = [*(PACKAGES / "tinker-client/src/tinker_client/templates").rglob("*.py"),
               *(p for env in ("echo", "math", "games") for p in (PACKAGES / f"tinker-env-{env}/src").rglob("*.py"))]
    seen = set()
    for path in sources:
        for parens, line in re.findall(r"^\s*from tinker_core import (?:\(([^)]*)\)|([^\n]+))", path.read_text(encoding="utf-8"), re.M):
            imported = {n.split(" as ")[0].strip() for n in (parens or line).split(",") if n.strip()}
            assert imported <= set(tinker_core.__all__), f"{path}: {sorted(imported - set(tinker_core.__all__))}"
            seen |= imported
    assert {"hookimpl", "EnvRegister", "EnvSpec", "TextEnv"} <= seen

