"""Check the monorepo's layering, private-name use, import cycles and module sizes.

Run ``python scripts/check_architecture.py`` (exit 1 and one line per problem when anything is
wrong); ``integration-tests/test_architecture.py`` runs it on every test run. It reads the source
as text (``ast``), so it needs none of the packages installed and sees every import: at module
level, inside functions (lazy imports count) and under ``if TYPE_CHECKING:`` (a type-only import
is still a dependency; import-linter counts them too).

The rules (see docs/explanation/architecture.md):

1. Layers depend only downward: core <- client, envs; core <- algos <- serve, scheduler; the umbrella
   ``opentinker`` (its front-door API) on core and algos (:data:`ALLOWED`), with the few
   module-level exceptions of :data:`ALLOWED_MODULES` (each with its reason).
2. No package imports a ``_private`` name or module of another package.
3. No import cycle between the modules of one package.
4. No source module longer than :data:`MAX_LINES` lines, except those in :data:`LONG_MODULES`
   (each with the reason it is one cohesive thing). Generated protobuf stubs are not counted.
5. No function or method in package sources longer than :data:`MAX_FUNCTION_LINES` lines (from
   its ``def`` to its last line, docstring and nested functions included), except those in
   :data:`LONG_FUNCTIONS`, each with its reason. The exception lives here, in one list beside the
   rule, not in the function's docstring: a reviewer sees every long function and why at once.
   Generated protobuf stubs and cookiecutter template sources are not counted.
6. The plugin-author code we ship -- the env packages (``packages/tinker-env-*``, sources and
   tests) and the ``opentinker new`` templates (``tinker_client/templates/``, every ``.py`` file,
   Jinja placeholders and all) -- imports tinker-core only from its top level
   (``from tinker_core import X``, ``import tinker_core``), never a submodule, so that the
   top-level names are the whole contract a plugin is written against. The exceptions are in
   :data:`SUBMODULE_IMPORTS`, each with its reason.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ENVS = ("tinker_env_echo", "tinker_env_math", "tinker_env_games", "tinker_env_adapters")

ALLOWED: dict[str, set[str]] = {
    "tinker_core": set(),
    "tinker_client": {"tinker_core"},
    "tinker_algos": {"tinker_core"},
    # tinker-serve's OpenAI app and tinker-client's viewer are HTTP fronts found in the plugin registry
    "tinker_scheduler": {"tinker_core", "tinker_algos"},
    "tinker_serve": {"tinker_core", "tinker_algos"},
    # rollout engines other than the built-in hf one: HTTP clients of their servers, on the contracts only
    "tinker_engine_vllm": {"tinker_core"},
    **{env: {"tinker_core"} for env in ENVS},
    # the umbrella distribution's front-door API (opentinker.train, ...): the engine, loaded lazily
    "opentinker": {"tinker_core", "tinker_algos"},
}
"""Import package -> the other first-party packages its source may import."""

ALLOWED_MODULES: dict[str, tuple[set[str], str]] = {}
"""Module -> (other packages it may import beyond its package's layer, why): narrow exceptions."""

MAX_LINES = 500

LONG_MODULES: dict[str, str] = {}
"""Source files (relative to packages/) allowed past MAX_LINES, with the reason."""

MAX_FOLDER_MODULES = 12
"""A folder is a room: past this many modules (``__init__`` aside) it gets sub-packages."""

CROWDED_FOLDERS: dict[str, str] = {
    "tinker-core/src/tinker_core": "the contracts package's root: 24 modules, each a public contract or helper plugin authors import by path; rooms for it are the next step",
    "tinker-scheduler/src/tinker_scheduler": "35 modules at the root (job loop, store, hosts, services, routes); rooms for it are the next step",
    "tinker-client/src/tinker_client": "17 modules at the root (CLI commands, the SDK, the viewer's loader, its plugin); rooms for it are the next step",
    "tinker-env-games/src/tinker_env_games": "13 modules: one per game and its opponents, scripted data",
}
"""Folders over :data:`MAX_FOLDER_MODULES` as they stand, each with why (debt, not a pass)."""

MAX_FUNCTION_LINES = 80
"""The most lines a function or method may have, its docstring included (rule 5)."""

_TESTS = "a test: uses the registry's test hooks or patches a module's internals"

LONG_FUNCTIONS: dict[str, str] = {}
"""Functions (``path relative to packages/::Qualified.name``, nested ones as
``outer.inner``) allowed past MAX_FUNCTION_LINES, with the reason."""

_TEMPLATES = "tinker-client/src/tinker_client/templates/"

TOP_LEVEL_ONLY = ("tinker-env-*", "tinker-client/src/tinker_client/templates")
"""Globs (under packages/) of the code that may import only ``tinker_core`` itself (rule 6)."""

SUBMODULE_IMPORTS: dict[str, str] = {
    # env packages' tests: the registry's test hooks (reset_plugins, list_plugins) are not public names;
    # test_coordinator also patches the coordinator module's internals
    "tinker-env-echo/tests/test_echo.py::tinker_core.registry": _TESTS,
    "tinker-env-games/tests/conftest.py::tinker_core.registry": _TESTS,
    "tinker-env-games/tests/test_conformance.py::tinker_core.registry": _TESTS,
    "tinker-env-math/tests/conftest.py::tinker_core.registry": _TESTS,
    "tinker-env-math/tests/test_arithmetic.py::tinker_core.registry": _TESTS,
    "tinker-env-math/tests/test_conformance.py::tinker_core.registry": _TESTS,
    "tinker-env-adapters/tests/conftest.py::tinker_core.registry": _TESTS,
    "tinker-env-adapters/tests/test_gymnasium.py::tinker_core.registry": _TESTS,
    "tinker-env-adapters/tests/test_unavailable.py::tinker_core.registry": _TESTS,
    # serves the test's OpenEnv app in a thread (the one helper for that, a testing aid)
    "tinker-env-adapters/tests/test_openenv.py::tinker_core.http_limits": _TESTS,
    "tinker-env-adapters/src/tinker_env_adapters/gymnasium_env.py::tinker_core.gymnasium_envs": (
        "tells OpenTinker's own envs in gymnasium's registry (tinker-core's build_env put them "
        "there) from gymnasium's, so gym/<id> never wraps an OpenTinker env"
    ),
}
"""Imports of a tinker-core submodule allowed in :data:`TOP_LEVEL_ONLY` code
(``path relative to packages/::module``), with the reason."""


@dataclass(frozen=True)
class Import:
    """One import statement: ``module`` imported (with ``names`` from it) at ``path:line``."""

    path: Path
    line: int
    module: str
    names: tuple[str, ...]


def source_roots(packages_dir: Path) -> dict[str, Path]:
    """Import package name -> its source directory, for every package under ``packages_dir``."""
    roots: dict[str, Path] = {}
    for src in sorted(packages_dir.glob("*/src")):
        for pkg in src.iterdir():
            if (pkg / "__init__.py").is_file():
                roots[pkg.name] = pkg
    return roots


def _module_name(path: Path, pkg_root: Path) -> str:
    parts = [pkg_root.name, *path.relative_to(pkg_root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, pkg_root: Path) -> Iterator[Import]:
    """Every import in ``path``, wherever it stands (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_name(path, pkg_root).split(".")
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            yield from visit_one(child)

    def visit_one(node: ast.AST) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(path, node.lineno, alias.name, ())
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_package else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield Import(path, node.lineno, module, tuple(a.name for a in node.names))
        else:
            yield from visit(node)

    yield from visit(tree)


def _modules(pkg_root: Path) -> dict[str, Path]:
    """Module name -> file; cookiecutter template sources (paths with ``{{``) are not modules."""
    return {_module_name(p, pkg_root): p for p in sorted(pkg_root.rglob("*.py")) if "{{" not in str(p)}


def _where(imp: Import, root: Path) -> str:
    try:
        return f"{imp.path.relative_to(root)}:{imp.line}"
    except ValueError:
        return f"{imp.path}:{imp.line}"


def _cycle(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def strong(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def function_lengths(path: Path) -> Iterator[tuple[str, int, int]]:
    """``(qualified name, first line, length in lines)`` of every function and method in ``path``,
    nested ones too (``outer.inner``, ``Class.method``); a function's length counts from its
    ``def`` to its last line, its docstring and nested functions included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    yield name, child.lineno, (child.end_lineno or child.lineno) - child.lineno + 1
                yield from walk(child, name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _long_functions(packages_dir: Path, path: Path) -> Iterator[str]:
    rel = path.relative_to(packages_dir).as_posix()
    for name, line, n in function_lengths(path):
        if n > MAX_FUNCTION_LINES and f"{rel}::{name}" not in LONG_FUNCTIONS:
            yield (f"{rel}:{line}: {name} is {n} lines (over {MAX_FUNCTION_LINES}); split it along its seams "
                   f"or add it to LONG_FUNCTIONS with the reason")


_IMPORT_LINE_RE = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\b|import\s+([\w.,\s]+?)\s*(?:#.*)?$)")


def _submodule_imports(packages_dir: Path) -> Iterator[str]:
    """Rule 6: imports of a tinker-core submodule in the env packages and the templates. Read line
    by line (a template is valid Python only once Jinja renders it), so an import is seen
    wherever it stands, nested in a function or under ``if TYPE_CHECKING:`` too."""
    files = sorted({p for pattern in TOP_LEVEL_ONLY for top in packages_dir.glob(pattern) for p in top.rglob("*.py")})
    for path in files:
        rel = path.relative_to(packages_dir).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = _IMPORT_LINE_RE.match(line)
            if match is None:
                continue
            modules = [match[1]] if match[1] else [m.split(" as ")[0].strip() for m in match[2].split(",")]
            for module in modules:
                if module.startswith("tinker_core.") and f"{rel}::{module}" not in SUBMODULE_IMPORTS:
                    yield (f"{rel}:{number}: imports {module}; plugin code imports tinker-core's top level only "
                           f"(from tinker_core import ...): export the name there, or list the import in "
                           f"SUBMODULE_IMPORTS with the reason")


def _folder_graph(pkg: str, graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between a package's sub-packages (its rooms: ``pkg.room``), from the module graph;
    the package's root modules are its front door and take no part."""

    def room(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 or (len(parts) == 2 and module in rooms) else None

    rooms = {".".join(m.split(".")[:2]) for m in graph if len(m.split(".")) > 2}
    folders: dict[str, set[str]] = {r: set() for r in rooms}
    for module, targets in graph.items():
        a = room(module)
        for target in targets:
            b = room(target)
            if a is not None and b is not None and a != b:
                folders[a].add(b)
    return folders


def _crowded_folders(packages_dir: Path, pkg_root: Path) -> Iterator[str]:
    """Folders with more than :data:`MAX_FOLDER_MODULES` modules that are not in :data:`CROWDED_FOLDERS`."""
    for folder in sorted({p.parent for p in pkg_root.rglob("*.py")}):
        rel = str(folder.relative_to(packages_dir))
        if "__pycache__" in rel or rel.startswith(_TEMPLATES.rstrip("/")):
            continue
        n = sum(1 for p in folder.glob("*.py") if p.name != "__init__.py")
        if n > MAX_FOLDER_MODULES and rel not in CROWDED_FOLDERS:
            yield f"{rel}: {n} modules (over {MAX_FOLDER_MODULES}); give it rooms: sub-packages that name what they hold"


def check(root: Path = ROOT) -> list[str]:
    """Every violation of the rules in the repository at ``root``, one line each."""
    packages_dir = root / "packages"
    roots = source_roots(packages_dir)
    problems: list[str] = []
    for pkg, pkg_root in roots.items():
        modules = _modules(pkg_root)
        graph: dict[str, set[str]] = {m: set() for m in modules}
        for module, path in modules.items():
            if "_pb2" not in path.name and path.suffix == ".py":
                n = len(path.read_text(encoding="utf-8").splitlines())
                rel = str(path.relative_to(packages_dir))
                if n > MAX_LINES and rel not in LONG_MODULES:
                    problems.append(f"{rel}: {n} lines (over {MAX_LINES}); split it along its seams")
                problems.extend(_long_functions(packages_dir, path))
            for imp in imports_of(path, pkg_root):
                top = imp.module.split(".")[0]
                where = _where(imp, root)
                if top in roots and top != pkg:
                    if top not in ALLOWED.get(pkg, set()) | ALLOWED_MODULES.get(module, (set(), ""))[0]:
                        problems.append(f"{where}: {pkg} imports {imp.module} (layers: {pkg} may import "
                                        f"{', '.join(sorted(ALLOWED.get(pkg, ()))) or 'no other package'})")
                    private = [p for p in imp.module.split(".")[1:] if p.startswith("_") and p != "__init__"]
                    private += [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
                    if private:
                        problems.append(f"{where}: {pkg} imports the private name(s) {', '.join(private)} "
                                        f"of {top}; make it public there or do without")
                elif top == pkg:
                    submodules = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in modules]
                    for target in submodules or [imp.module]:
                        if target in modules and target != module:
                            graph[module].add(target)
        for component in _cycle(graph):
            problems.append(f"{pkg}: import cycle between {', '.join(component)}")
        for component in _cycle(_folder_graph(pkg, graph)):
            problems.append(f"{pkg}: folder ring between {', '.join(component)} (a room imports one that imports it back; "
                            "move the shared piece below both)")
        problems.extend(_crowded_folders(packages_dir, pkg_root))
    problems.extend(_submodule_imports(packages_dir))
    return problems


def main() -> int:
    problems = check(ROOT)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} architecture problem(s)", file=sys.stderr)
        return 1
    print("architecture: layers, private names, cycles, module and function sizes, plugin imports are clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
