"""The Debian packages some test sessions drive, installed by the nox session that needs them.

``uv run --locked nox`` (the README's test command) must pass on a fresh machine, so the sessions
get what their tests need themselves instead of relying on CI's set-up: headless Chromium for
tinker-serve's chat-page test and tmux for the terminal recordings. When a package is missing,
:func:`ensure` installs it with ``apt-get`` if it can (as root, or with ``sudo`` that needs no
password; ``apt-get update`` first when the plain install fails); otherwise it raises
:class:`SetupError` at once with the one command to run. When everything is present, nothing is
run at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

# Each package and how to tell it is present: an absolute path that must exist (the chat-page
# test launches exactly /usr/bin/chromium) or a command on PATH.
PROBES: dict[str, str] = {
    "chromium": "/usr/bin/chromium",
    "tmux": "tmux",
    "prometheus": "promtool",  # only its rule checker is used (the server is not started)
}


class SetupError(RuntimeError):
    """A package the tests need is missing and could not be installed from here."""


def _present(probe: str) -> bool:
    if os.path.isabs(probe):
        return os.access(probe, os.X_OK) and Path(probe).is_file()
    return shutil.which(probe) is not None


def missing(packages: Iterable[str], present: Callable[[str], bool] = _present) -> list[str]:
    """The packages in ``packages`` whose probe in :data:`PROBES` finds nothing."""
    return [name for name in packages if not present(PROBES[name])]


def _can_sudo(run: Callable[..., subprocess.CompletedProcess]) -> bool:
    if shutil.which("sudo") is None:
        return False
    return run(["sudo", "-n", "true"], capture_output=True).returncode == 0


def ensure(
    packages: Sequence[str],
    *,
    log: Callable[[str], object] = print,
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    present: Callable[[str], bool] = _present,
    uid: int | None = None,
    has_apt: bool | None = None,
    can_sudo: bool | None = None,
) -> list[str]:
    """Install the missing ones of ``packages``; return what was installed (empty: all present).

    The keyword arguments other than ``log`` exist for the tests (a fake ``run``, ``present``,
    user id and so on); by default they look at this machine.
    """
    absent = missing(packages, present)
    if not absent:
        return []
    names = " ".join(absent)
    has_apt = shutil.which("apt-get") is not None if has_apt is None else has_apt
    if not has_apt:
        raise SetupError(f"the tests need {names}, which is missing and this machine has no apt-get: "
                         f"install {names} with its package manager (Debian: apt-get install -y {names})")
    uid = os.getuid() if uid is None else uid
    if uid == 0:
        prefix: list[str] = []
    elif can_sudo if can_sudo is not None else _can_sudo(run):
        prefix = ["sudo", "-n"]
    else:
        raise SetupError(f"the tests need {names}, which is missing; run this once, then the tests again:\n"
                         f"    sudo apt-get install -y {names}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*prefix, "apt-get", "install", "-y", "-q", *absent]
    log(f"installing the Debian packages the tests need: {' '.join(install)}")
    if run(install, env=env).returncode != 0:
        log("apt-get install failed; running apt-get update, then the install again")
        run([*prefix, "apt-get", "update", "-q"], env=env)
        if run(install, env=env).returncode != 0:
            raise SetupError(f"could not install {names}; run: {' '.join(install)}")
    still = missing(absent, present)
    if still:
        raise SetupError(f"apt-get installed {names} but {' '.join(still)} is still missing "
                         f"({', '.join(PROBES[n] for n in still)})")
    return absent
