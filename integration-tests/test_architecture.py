"""The repository's shape: layers, private names, import cycles, module and function sizes, and
plugin code importing only tinker-core's top level.

``scripts/check_architecture.py`` holds the rules; here it runs on the real tree (which must be
clean) and on a copy of it with deliberately bad imports added (which it must catch).
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_architecture", ROOT / "scripts" / "check_architecture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


checker = _load_checker()


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """A copy of every package's source (tests and templates left out), to break on purpose."""
    for src in (ROOT / "packages").glob("*/src"):
        shutil.copytree(src, tmp_path / "packages" / src.parent.name / "src",
                        ignore=shutil.ignore_patterns("templates", "__pycache__", "*.pyc"))
    return tmp_path


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + "\n" + text + "\n", encoding="utf-8")


def test_the_repository_is_clean() -> None:
    problems = checker.check(ROOT)
    assert problems == [], "\n".join(problems)


def test_a_copy_of_the_tree_is_judged_like_the_tree(tree_copy: Path) -> None:
    assert checker.check(tree_copy) == checker.check(ROOT)


def test_an_upward_import_inside_a_function_is_caught(tree_copy: Path) -> None:
    cli = tree_copy / "packages/tinker-client/src/tinker_client/cli.py"
    _append(cli, "def _sneaky():\n    from tinker_algos import run\n    return run")
    problems = checker.check(tree_copy)
    assert any("tinker_client/cli.py" in p and "tinker_client imports tinker_algos" in p for p in problems), problems


def test_core_importing_another_package_is_caught(tree_copy: Path) -> None:
    _append(tree_copy / "packages/tinker-core/src/tinker_core/errors.py", "import tinker_client")
    problems = checker.check(tree_copy)
    assert any("tinker_core imports tinker_client" in p for p in problems), problems


def test_algos_importing_an_env_package_is_caught(tree_copy: Path) -> None:
    _append(tree_copy / "packages/tinker-algos/src/tinker_algos/builtins/kl.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tinker_env_games import tictactoe")
    problems = checker.check(tree_copy)
    assert any("tinker_algos imports tinker_env_games" in p for p in problems), problems


def test_a_private_name_of_another_package_is_caught(tree_copy: Path) -> None:
    _append(tree_copy / "packages/tinker-scheduler/src/tinker_scheduler/policy.py",
            "from tinker_algos.model.models import _hidden_helper")
    problems = checker.check(tree_copy)
    assert any("private name(s) _hidden_helper of tinker_algos" in p for p in problems), problems


def test_an_import_cycle_is_caught(tree_copy: Path) -> None:
    _append(tree_copy / "packages/tinker-core/src/tinker_core/fsm.py", "from tinker_core import timeouts as _timeouts")
    _append(tree_copy / "packages/tinker-core/src/tinker_core/timeouts.py", "from tinker_core.fsm import TurnFSM as _T")
    problems = checker.check(tree_copy)
    assert any("import cycle" in p and "tinker_core.fsm" in p and "tinker_core.timeouts" in p for p in problems), problems


def test_a_long_module_is_caught(tree_copy: Path) -> None:
    _append(tree_copy / "packages/tinker-core/src/tinker_core/fsm.py", "\n".join(f"x{i} = {i}" for i in range(600)))
    problems = checker.check(tree_copy)
    assert any("tinker_core/fsm.py" in p and "over 500" in p for p in problems), problems


def test_a_long_function_is_caught(tree_copy: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(checker.MAX_FUNCTION_LINES))
    _append(tree_copy / "packages/tinker-core/src/tinker_core/errors.py", f"def _long():\n{body}\n    return x0")
    problems = checker.check(tree_copy)
    assert any("tinker_core/errors.py" in p and "_long is 82 lines (over 80)" in p for p in problems), problems


def test_a_long_method_and_a_long_nested_function_are_caught(tree_copy: Path) -> None:
    body = "\n".join(f"            y{i} = {i}" for i in range(checker.MAX_FUNCTION_LINES))
    _append(tree_copy / "packages/tinker-core/src/tinker_core/errors.py",
            f"class _Holder:\n    def method(self):\n        def inner():\n{body}\n        return inner")
    problems = checker.check(tree_copy)
    assert any("_Holder.method is 83 lines" in p for p in problems), problems
    assert any("_Holder.method.inner is 81 lines" in p for p in problems), problems


def test_a_function_of_80_lines_passes(tree_copy: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(checker.MAX_FUNCTION_LINES - 2))
    _append(tree_copy / "packages/tinker-core/src/tinker_core/errors.py", f"def _long():\n{body}\n    return x0")
    assert checker.check(tree_copy) == checker.check(ROOT)


def test_a_listed_long_function_passes(tree_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(checker.MAX_FUNCTION_LINES))
    _append(tree_copy / "packages/tinker-core/src/tinker_core/errors.py", f"def _long():\n{body}\n    return x0")
    monkeypatch.setitem(checker.LONG_FUNCTIONS, "tinker-core/src/tinker_core/errors.py::_long", "a test")
    assert checker.check(tree_copy) == checker.check(ROOT)


def test_every_listed_long_function_exists_and_is_long() -> None:
    """An entry of LONG_FUNCTIONS whose function was split (or renamed) goes from the list."""
    lengths = {
        f"{path.relative_to(ROOT / 'packages').as_posix()}::{name}": n
        for path in (ROOT / "packages").glob("*/src/**/*.py") if "{{" not in str(path)
        for name, _, n in checker.function_lengths(path)
    }
    stale = [key for key in checker.LONG_FUNCTIONS if lengths.get(key, 0) <= checker.MAX_FUNCTION_LINES]
    assert not stale, f"no longer long (or gone): remove from LONG_FUNCTIONS: {stale}"


def _env_module(tree: Path) -> Path:
    return tree / "packages/tinker-env-math/src/tinker_env_math/arithmetic.py"


def test_an_env_package_importing_a_core_submodule_is_caught(tree_copy: Path) -> None:
    _append(_env_module(tree_copy), "def _sneaky():\n    from tinker_core.fsm import TurnFSM\n    return TurnFSM")
    problems = checker.check(tree_copy)
    assert any("tinker_env_math/arithmetic.py" in p and "imports tinker_core.fsm" in p for p in problems), problems


def test_a_plain_import_of_a_core_submodule_is_caught(tree_copy: Path) -> None:
    _append(_env_module(tree_copy), "import json, tinker_core.registry as reg")
    problems = checker.check(tree_copy)
    assert any("imports tinker_core.registry" in p for p in problems), problems


def test_top_level_core_imports_pass(tree_copy: Path) -> None:
    _append(_env_module(tree_copy), "import tinker_core\nfrom tinker_core import EnvSpec as _Spec")
    assert checker.check(tree_copy) == checker.check(ROOT)


def test_a_template_importing_a_core_submodule_is_caught(tree_copy: Path) -> None:
    """Templates are Jinja (not valid Python before rendering): the rule reads them line by line."""
    templates = ROOT / "packages/tinker-client/src/tinker_client/templates"
    target = tree_copy / "packages/tinker-client/src/tinker_client/templates"
    shutil.copytree(templates, target)
    plugin = next(target.glob("env/*/src/*/plugin.py"))
    _append(plugin, "{% if cookiecutter.env_type %}\nfrom tinker_core.fsm import TurnFSM\n{% endif %}")
    problems = checker.check(tree_copy)
    assert any("templates/env/" in p and "plugin.py" in p and "imports tinker_core.fsm" in p for p in problems), problems


def test_every_listed_submodule_import_is_still_there() -> None:
    """An entry of SUBMODULE_IMPORTS whose import was fixed goes from the list."""
    stale = []
    for key in checker.SUBMODULE_IMPORTS:
        rel, module = key.split("::")
        path = ROOT / "packages" / rel
        if not path.is_file() or not any(
            (m := checker._IMPORT_LINE_RE.match(line)) and module in (m[1] or m[2] or "")
            for line in path.read_text(encoding="utf-8").splitlines()
        ):
            stale.append(key)
    assert not stale, f"no longer imported: remove from SUBMODULE_IMPORTS: {stale}"


PACKAGES = ["tinker_core", "tinker_client", "tinker_algos", "tinker_scheduler",
            "tinker_env_echo", "tinker_env_math", "tinker_env_games", "tinker_env_adapters", "tinker_engine_vllm"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package: str) -> None:
    """Each name in a package's ``__all__`` loads (a lazy export pointing at the wrong module fails here)."""
    module = importlib.import_module(package)
    missing = []
    for name in getattr(module, "__all__", []):
        try:
            getattr(module, name)
        except (AttributeError, ImportError) as e:
            missing.append(f"{name}: {e}")
    assert not missing, missing
