"""tinker_core.lazy: a package lists its names once, in its ``if TYPE_CHECKING:`` imports."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def make_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(name: str, init: str, **modules: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(textwrap.dedent(init))
        for module, text in modules.items():
            (tmp_path / name / f"{module}.py").write_text(textwrap.dedent(text))
        made.append(name)

    yield make
    for name in made:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]


def test_names_imported_under_type_checking_load_on_first_use(make_package) -> None:  # type: ignore[no-untyped-def]
    make_package(
        "lazypkg_a",
        """
        from typing import TYPE_CHECKING
        from tinker_core.lazy import lazy_package

        __version__ = "1.0"

        if TYPE_CHECKING:
            from lazypkg_a.heavy import Heavy as Heavy
            from .light import light, other as other

        __getattr__, __dir__, __all__ = lazy_package(__name__, "__version__")
        """,
        heavy="class Heavy: ...\n",
        light="def light(): return 1\ndef other(): return 2\n",
    )
    import lazypkg_a

    assert lazypkg_a.__all__ == ["Heavy", "light", "other", "__version__"]
    assert dir(lazypkg_a) == sorted(lazypkg_a.__all__)
    assert "lazypkg_a.heavy" not in sys.modules
    assert lazypkg_a.Heavy.__module__ == "lazypkg_a.heavy"
    assert lazypkg_a.light() == 1 and "light" in vars(lazypkg_a)  # cached after the first use
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        lazypkg_a.missing  # noqa: B018


def test_a_renamed_lazy_name_is_refused(make_package) -> None:  # type: ignore[no-untyped-def]
    make_package(
        "lazypkg_b",
        """
        from typing import TYPE_CHECKING
        from tinker_core.lazy import lazy_package

        if TYPE_CHECKING:
            from lazypkg_b.mod import thing as alias

        __getattr__, __dir__, __all__ = lazy_package(__name__)
        """,
        mod="thing = 1\n",
    )
    with pytest.raises(ValueError, match=r"cannot be renamed \(thing as alias\)"):
        import lazypkg_b  # noqa: F401


def test_the_conformance_kit_exports_what_it_imports_for_type_checkers() -> None:
    import tinker_core.testing

    assert "check_env" in tinker_core.testing.__all__
    assert tinker_core.testing.check_env.__module__ == "tinker_core.testing.envs"
