"""Meta-tests: every hook, config field and CLI command is documented; doc examples run."""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import tinker_core
import tinker_core.registry
from tinker_core import hookspecs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
HOOKS = [getattr(hookspecs, name) for name in hookspecs.HOOK_NAMES]


def all_test_sources() -> str:
    files = list((ROOT / "packages").glob("*/tests/**/test_*.py")) + list((ROOT / "integration-tests").glob("test_*.py"))
    return "\n".join(f.read_text(encoding="utf-8") for f in files)


def test_every_hookspec_is_listed_and_has_the_project_prefix():
    declared = {n for n, v in vars(hookspecs).items() if callable(v) and hasattr(v, "opentinker_spec")}
    assert declared == set(hookspecs.HOOK_NAMES)
    assert all(n.startswith("opentinker_") for n in declared)


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.__name__)
def test_hook_is_documented_with_its_exact_signature(hook):
    params = ", ".join(inspect.signature(hook).parameters)
    heading = f"## `{hook.__name__}({params})`"
    text = (DOCS / "reference" / "hooks.md").read_text(encoding="utf-8")
    assert heading in text, f"docs/reference/hooks.md needs a section headed {heading}"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    assert "```python" in section and "@hookimpl" in section, f"{hook.__name__}: the section needs an example"
    assert hook.__doc__ and ":param" in hook.__doc__, f"{hook.__name__}: the hookspec needs a docstring with its parameter"


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.__name__)
def test_hook_has_a_test(hook):
    assert f"def test_hook_{hook.__name__}(" in all_test_sources(), f"write a test named test_hook_{hook.__name__}"


def test_config_reference_is_fresh():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_config_field_has_a_description():
    from tinker_core.config.reference import SECTIONS as _SECTIONS

    missing = [f"{section}.{name}" for section, model in _SECTIONS for name, f in model.model_fields.items() if not f.description]
    assert not missing, f"describe these config fields: {missing}"


def test_every_cli_command_is_documented():
    import typer.main

    from tinker_client.cli import build_app

    tinker_core.registry.reset_plugins()
    group = typer.main.get_command(build_app())
    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")

    def walk(cmd, prefix):
        for name, sub in getattr(cmd, "commands", {}).items():
            full = f"{prefix} {name}"
            if getattr(sub, "commands", None):
                yield from walk(sub, full)
            else:
                yield full

    undocumented = [c for c in walk(group, "opentinker") if f"## `{c}" not in text]
    assert not undocumented, f"docs/reference/cli.md needs a section for: {undocumented}"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize(
    "page", sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if python_blocks(p))
)
def test_doc_examples_run(page, monkeypatch):
    """Each page's Python blocks run in order, in one fresh module namespace.

    A page whose examples need a live service says so in its first lines with
    ``<!-- docs-test: skip (reason) -->``; its examples are then run by the test that its
    comment names instead.
    """
    head = (DOCS / page).read_text(encoding="utf-8")[:500]
    marker = re.search(r"<!-- docs-test: skip \((.+?)\) -->", head)
    if marker:
        pytest.skip(f"{page}: {marker.group(1)}")
    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
    tinker_core.registry.reset_plugins()
    module = types.ModuleType("doc_" + re.sub(r"\W", "_", page))
    sys.modules[module.__name__] = module
    try:
        for i, block in enumerate(python_blocks(DOCS / page)):
            code = compile(block, f"{page}[block {i}]", "exec")
            exec(code, module.__dict__)
    finally:
        del sys.modules[module.__name__]
        tinker_core.registry.reset_plugins()


def test_mkdocs_builds_strict(tmp_path):
    mkdocs = shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed in this environment (it is in the workspace dev group)")
    result = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_oracle_page_derives_the_values_the_tests_cite():
    """docs/reference/oracles.md: each worked value follows from its formula (numpy, no project code)."""
    import math

    import numpy as np

    text = (DOCS / "reference" / "oracles.md").read_text(encoding="utf-8")
    r, v, lam = [0.0, 0.0, 1.0], [0.5, 0.6, 0.7], 0.95
    adv, nxt_a, nxt_v = [0.0] * 3, 0.0, 0.0
    for t in reversed(range(3)):
        nxt_a = r[t] + nxt_v - v[t] + lam * nxt_a
        adv[t], nxt_v = nxt_a, v[t]
    R = np.array([1.0, 0.0, 0.0, 1.0])
    x = math.log(0.25) - math.log(0.5)
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    from scipy import stats

    t_975_2 = stats.t.ppf(0.975, 2)  # the t interval's quantile at 3 seeds
    l_ = np.array([[1.0, 2, 3], [4, 0, 0]])
    m = np.array([[1.0, 1, 1], [1, 0, 0]])
    values = {
        "gae": adv,
        "returns": [a + b for a, b in zip(adv, v, strict=True)],
        "grpo": (R - R.mean()) / R.std(ddof=1),  # eps = 1e-6 moves it by 1e-6: "within 1e-5"
        "rloo": R - (R.sum() - R) / 3,
        "dpo": [-math.log(sig(0.2))],
        "cdpo": [-0.9 * math.log(sig(0.2)) - 0.1 * math.log(sig(-0.2))],
        "ipo": [(2 - 1 / 0.2) ** 2],
        "kl": [-x, x * x / 2, math.exp(x) - x - 1],
        "agg": [(l_ * m).sum() / m.sum(), ((l_ * m).sum(1) / m.sum(1)).mean(), (l_ * m).sum(1).mean(), (l_ * m).sum(1).mean() / 3],
        "compare": [np.trapezoid([0, 1, 1], [0, 10, 20]) / 20, np.trapezoid([0, 0.6, 0.2], [10, 12, 20]) / 10,
                    t_975_2, 3.5 / 4, 20.5 / 25],
    }
    for name, numbers in values.items():
        for number in numbers:
            shown = f"{abs(float(number)):.6f}".rstrip("0")
            shown += "0" if shown.endswith(".") else ""
            assert re.search(rf"(?<![\d.]){re.escape(shown)}(?!\d)", text), f"{name}: {shown} is not on the oracle page"
