"""The README's test command gets its own set-up: the nox sessions install the Debian packages their
tests drive (scripts/debian_packages.py), and ``.ci/run`` is nothing but uv and that command."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


debian = _load("debian_packages", ROOT / "scripts" / "debian_packages.py")


class FakeApt:
    """Records the commands; ``installs_fail`` first installs fail; installing makes packages present."""

    def __init__(self, present: set[str], installs_fail: int = 0) -> None:
        self.calls: list[list[str]] = []
        self.present_names = set(present)
        self.installs_fail = installs_fail

    def present(self, probe: str) -> bool:
        return any(debian.PROBES[n] == probe for n in self.present_names)

    def run(self, command: list[str], **_: object) -> subprocess.CompletedProcess:
        self.calls.append(command)
        if "install" in command:
            if self.installs_fail:
                self.installs_fail -= 1
                return subprocess.CompletedProcess(command, 100)
            self.present_names |= {c for c in command if c in debian.PROBES}
        return subprocess.CompletedProcess(command, 0)


def test_nothing_runs_when_every_package_is_present():
    apt = FakeApt({"chromium", "tmux"})
    assert debian.ensure(["chromium", "tmux"], run=apt.run, present=apt.present, uid=1000,
                         has_apt=True, can_sudo=False, log=lambda _: None) == []
    assert apt.calls == []


def test_root_installs_only_the_missing_package():
    apt = FakeApt({"tmux"})
    assert debian.ensure(["chromium", "tmux"], run=apt.run, present=apt.present, uid=0, has_apt=True,
                         log=lambda _: None) == ["chromium"]
    assert apt.calls == [["apt-get", "install", "-y", "-q", "chromium"]]


def test_a_failed_install_updates_the_index_and_tries_again_with_sudo():
    apt = FakeApt(set(), installs_fail=1)
    debian.ensure(["chromium"], run=apt.run, present=apt.present, uid=1000, has_apt=True, can_sudo=True,
                  log=lambda _: None)
    assert apt.calls == [["sudo", "-n", "apt-get", "install", "-y", "-q", "chromium"],
                         ["sudo", "-n", "apt-get", "update", "-q"],
                         ["sudo", "-n", "apt-get", "install", "-y", "-q", "chromium"]]


def test_without_root_or_sudo_it_fails_at_once_with_the_command_to_run():
    apt = FakeApt(set())
    with pytest.raises(debian.SetupError, match=r"sudo apt-get install -y chromium tmux"):
        debian.ensure(["chromium", "tmux"], run=apt.run, present=apt.present, uid=1000, has_apt=True,
                      can_sudo=False, log=lambda _: None)
    assert apt.calls == []


def test_an_install_that_keeps_failing_names_the_command():
    apt = FakeApt(set(), installs_fail=2)
    with pytest.raises(debian.SetupError, match=r"apt-get install -y -q tmux"):
        debian.ensure(["tmux"], run=apt.run, present=apt.present, uid=0, has_apt=True, log=lambda _: None)


def test_the_sessions_that_drive_chromium_tmux_and_promtool_ask_for_them():
    noxfile = (ROOT / "noxfile.py").read_text()
    assert '"tinker-serve": ["chromium"]' in noxfile and '"integration": ["tmux", "prometheus"]' in noxfile
    assert debian.PROBES["prometheus"] == "promtool"  # test_helm_chart.py runs promtool
    assert "system_packages(session, DEBIAN_PACKAGES.get(package, []))" in noxfile
    assert 'system_packages(session, DEBIAN_PACKAGES["integration"])' in noxfile


def test_ci_run_is_the_readme_test_command_and_nothing_else():
    script = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert "apt-get" not in script and "sudo" not in script
    assert commands[-1] == "uv run --locked nox"
    assert "uv run --locked nox" in (ROOT / "README.md").read_text()
