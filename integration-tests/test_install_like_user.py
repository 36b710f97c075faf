"""OpenTinker installed as a user installs it: from built wheels, into a fresh ``python -m venv``,
with pip (not uv, not the workspace).

1. ``opentinker[train]``: torch CPU-only first (as docs/install.md says), then the umbrella with
   its extra; ``opentinker plugins --json`` lists the built-in plugins and a shortened
   ``opentinker train examples/arithmetic.yaml`` completes and writes its TensorBoard files and
   curve plot (the extras ``opentinker[train]`` brings).
2. ``tinker-core`` alone, what an env author depends on: no torch, no Ray, no grpc; its README's
   example (an env, registered and passed through the conformance kit) runs.

The wheels are built by ``uv build --all-packages``. The sibling wheels are given to pip as files
(with ``--find-links`` for the rest) so that pip can never take a same-named distribution from
an index instead; everything else comes from the package index. Two shortcuts keep the test
near two minutes on a 2-core machine (pip alone took about 7): torch, which this test does not
test, is pre-installed by ``uv pip`` (hardlinked from uv's cache in seconds, where pip unpacks
1 GB every time), and pip runs with ``--no-compile`` (the processes then compile only the
modules they import, as Python does for any source without bytecode).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TRAIN_WHEELS = ("opentinker", "tinker_core", "tinker_client", "tinker_algos", "tinker_env_echo",
                "tinker_env_math", "tinker_env_games")
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"

pytestmark = pytest.mark.slow


def clean_env(**extra: str) -> dict[str, str]:
    """A user's shell: no workspace venv or plugin switches; pip's own configuration is kept.

    Bytecode writing stays on, so the second process that imports torch finds it compiled.
    """
    drop = {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHOME",
            "OPENTINKER_LOAD_PLUGINS", "OPENTINKER_DISABLE_PLUGIN_AUTOLOAD"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    env.update(extra)
    return env


def run(args: list[str | Path], *, cwd: Path | None = None, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=clean_env(**env), capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} exited {result.returncode}\n--- stdout\n{result.stdout[-4000:]}"
                    f"\n--- stderr\n{result.stderr[-4000:]}", pytrace=False)
    return result


def cpu_torch() -> list[str]:
    """``uv pip install`` arguments for a CPU-only torch: a CPU wheel from pip's ``find-links``
    folders when they hold one (this project's machines keep one there because PyTorch's CPU
    index is out of their reach), else PyTorch's CPU index, as docs/install.md tells users."""
    for folder in os.environ.get("PIP_FIND_LINKS", "").split():
        wheels = sorted(Path(folder).glob(f"torch-*+cpu-cp{sys.version_info.major}{sys.version_info.minor}-*.whl"))
        if wheels:
            return [str(wheels[-1])]
    return ["torch", "--index-url", CPU_TORCH_INDEX]


def make_venv(path: Path) -> Path:
    """A fresh ``python -m venv`` (pip included); returns its bin directory."""
    run([sys.executable, "-m", "venv", path])
    return path / "bin"


FIND = """
import importlib.util, json, sys

def found(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False

print(json.dumps({m: found(m) for m in sys.argv[1:]}))
"""


def installed(python: Path, *modules: str) -> dict[str, bool]:
    """Which of ``modules`` the venv of ``python`` can import."""
    return json.loads(run([python, "-c", FIND, *modules]).stdout)


@pytest.fixture(scope="module")
def uv() -> str:
    found = shutil.which("uv")
    if found is None:
        pytest.skip("uv is not on PATH; the README's set-up installs it")
    return found


@pytest.fixture(scope="module")
def wheels(uv: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    run([uv, "build", "--all-packages", "--wheel", "--quiet", "--out-dir", out], cwd=ROOT)
    found = {re.match(r"(.+?)-\d", p.name)[1]: p for p in out.glob("*.whl")}
    assert set(TRAIN_WHEELS) <= set(found), sorted(found)
    return found


def test_opentinker_train_from_wheels_in_a_fresh_venv(uv, wheels, tmp_path):
    bin_dir = make_venv(tmp_path / "venv")
    run([uv, "pip", "install", "--quiet", "--python", bin_dir / "python", *cpu_torch()])
    umbrella = f"{wheels['opentinker']}[train]"
    siblings = [wheels[name] for name in TRAIN_WHEELS if name != "opentinker"]
    run([bin_dir / "pip", "install", "--quiet", "--no-compile", "--find-links", wheels["opentinker"].parent,
         umbrella, *siblings])

    have = installed(bin_dir / "python", "torch", "tensorboard", "matplotlib", "ray", "tinker_scheduler")
    assert have == {"torch": True, "tensorboard": True, "matplotlib": True, "ray": False, "tinker_scheduler": False}
    torch_version = run([bin_dir / "python", "-c", "import torch; print(torch.__version__)"]).stdout
    assert "+cpu" in torch_version or "+cu" not in torch_version, f"the CUDA build was installed: {torch_version}"

    plugins = {p["distribution"]: p for p in json.loads(run([bin_dir / "opentinker", "plugins", "--json"]).stdout)}
    assert {"tinker-algos", "tinker-env-math", "tinker-env-games", "tinker-env-echo"} <= set(plugins)
    assert "math/arithmetic-v0" in plugins["tinker-env-math"]["registers"]["envs"]

    # the README's main command, examples/arithmetic.yaml, with 2 steps per stage
    job = yaml.safe_load((ROOT / "examples" / "arithmetic.yaml").read_text())
    for stage in job["stages"]:
        stage["algorithm"].update(steps=2, eval_size=4)
        if "batch_size" in stage["algorithm"]:
            stage["algorithm"]["batch_size"] = 8
    job["rollout"].update(prompts_per_step=2, group_size=4)
    job["checkpoint"] = {"every": 2, "keep": 1}
    (tmp_path / "arithmetic.yaml").write_text(yaml.safe_dump(job))
    result = run([bin_dir / "opentinker", "train", "arithmetic.yaml"], cwd=tmp_path,
                 OPENTINKER_CACHE=str(tmp_path / "cache"))
    run_dir = tmp_path / "runs" / "arithmetic"
    assert json.loads((run_dir / "result.json").read_text())["status"] == "completed", result.stdout
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 2 * len(job["stages"])  # 2 steps per stage (two SFT stages, then GRPO)
    assert (run_dir / "curve.png").is_file()
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))


def test_tinker_core_alone_needs_no_torch_ray_or_grpc(wheels, tmp_path):
    bin_dir = make_venv(tmp_path / "venv")
    run([bin_dir / "pip", "install", "--quiet", "--no-compile", wheels["tinker_core"]])
    have = installed(bin_dir / "python", "tinker_core", "torch", "ray", "grpc", "google.protobuf", "tinker_client")
    assert have == {"tinker_core": True, "torch": False, "ray": False, "grpc": False, "google.protobuf": False,
                    "tinker_client": False}
    readme = (ROOT / "packages" / "tinker-core" / "README.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    (tmp_path / "example.py").write_text(example)
    result = run([bin_dir / "python", "example.py"], cwd=tmp_path)
    assert result.stdout.strip() == "('Shout: hello\\n', {'target': 'HELLO'}) ('', 1.0, True, False, {})"
