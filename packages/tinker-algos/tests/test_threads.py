"""``model.threads``: the torch intra-op threads an embedded job runs with."""

from __future__ import annotations

import os

import pytest
import torch

from tinker_algos import train
from tinker_core.config import parse_config
from tinker_core.errors import ConfigError

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")


def job(**model):
    return {
        "name": "threads",
        "model": {"name": "tiny", "device": "cpu", **model},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd"]}},
        "stages": [{"algorithm": {"name": "sft", "steps": 1, "batch_size": 2, "eval_size": 1}}],
        "rollout": {"max_new_tokens": 2, "stop": ["\n"]},
        "logging": {"tensorboard": False, "plot": False},
    }


def test_a_job_runs_with_the_threads_its_config_asks_for(tmp_path):
    before = torch.get_num_threads()
    seen = []
    try:
        class Spy:
            def on_metrics(self, step, metrics):
                seen.append(torch.get_num_threads())

        assert train(job(threads=1), run_dir=tmp_path / "one", callbacks=Spy()).status == "completed"
        assert seen == [1]
        torch.set_num_threads(before)
        seen.clear()
        assert train(job(), run_dir=tmp_path / "default", callbacks=Spy()).status == "completed"
        assert seen == [before]  # None leaves torch's setting alone
    finally:
        torch.set_num_threads(before)


def test_threads_must_be_positive():
    with pytest.raises(ConfigError, match="model.threads"):
        parse_config(job(threads=0))


def _policy_in_child(code: str, **env: str) -> str:
    import os
    import subprocess
    import sys

    child_env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | env
    out = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_openmp_threads_wait_passively_when_half_the_cores_are_busy():
    from tinker_algos.model.openmp import wait_policy_for

    assert wait_policy_for(0.3, 2) is None and wait_policy_for(0.99, 2) is None
    assert wait_policy_for(1.0, 2) == "PASSIVE" and wait_policy_for(7.5, 2) == "PASSIVE"
    assert wait_policy_for(3.9, 8) is None and wait_policy_for(4.0, 8) == "PASSIVE"
    assert wait_policy_for(0.5, 1) is None and wait_policy_for(1.0, 1) == "PASSIVE"


def _proc_loadavg(running: int) -> str:
    """Code that makes the child's reads of /proc/loadavg see ``running`` runnable threads."""
    return (
        "import builtins, io; _open = builtins.open; "
        f"builtins.open = lambda p, *a, **k: io.StringIO('0.50 0.40 0.30 {running}/400 999') "
        "if p == '/proc/loadavg' else _open(p, *a, **k); "
    )


def test_importing_tinker_algos_chooses_the_wait_policy_before_torch_loads():
    cores = os.cpu_count() or 1
    busy = _proc_loadavg(1 + max(1, -(-cores // 2)))  # this process plus half the cores (rounded up)
    idle = _proc_loadavg(1) + "import os; os.getloadavg = lambda: (64.0, 64.0, 64.0); "  # the lagging average is not read
    show = "; print(os.environ.get('OMP_WAIT_POLICY'))"
    assert _policy_in_child(busy + "import os, tinker_algos" + show) == "PASSIVE"
    assert _policy_in_child(idle + "import tinker_algos" + show) == "None"
    # the user's own choice stands, and torch already loaded is left alone (too late to matter)
    assert _policy_in_child(busy + "import os, tinker_algos" + show, OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
    assert _policy_in_child(busy + "import os, torch, tinker_algos" + show) == "None"


def test_without_proc_loadavg_the_one_minute_load_average_decides():
    no_proc = (
        "import builtins, os; _open = builtins.open\n"
        "def fake(p, *a, **k):\n"
        "    if p == '/proc/loadavg': raise FileNotFoundError(p)\n"
        "    return _open(p, *a, **k)\n"
        "builtins.open = fake\n"
    )
    show = "\nprint(os.environ.get('OMP_WAIT_POLICY'))"
    busy = no_proc + "os.getloadavg = lambda: (64.0, 64.0, 64.0)\nimport tinker_algos"
    idle = no_proc + "os.getloadavg = lambda: (0.0, 0.0, 0.0)\nimport tinker_algos"
    assert _policy_in_child(busy + show) == "PASSIVE"
    assert _policy_in_child(idle + show) == "None"


def test_runnable_others_reads_the_running_count_less_this_thread(tmp_path, monkeypatch):
    from tinker_algos.model import openmp

    f = tmp_path / "loadavg"
    f.write_text("1.20 1.10 0.90 3/512 4242\n")
    monkeypatch.setattr(openmp, "LOADAVG", str(f))
    assert openmp.runnable_others(reads=3, interval_s=0) == 2.0
    f.write_text("garbage\n")
    assert openmp.runnable_others(reads=1) is None
    monkeypatch.setattr(openmp, "LOADAVG", str(tmp_path / "missing"))
    assert openmp.runnable_others(reads=1) is None