"""Generate the Python stubs of OpenTinker's wire protocol from its .proto files.

The .proto files live in ``packages/tinker-core/src/tinker_core/proto/``; protoc runs with
``packages/tinker-core/src`` as its include root, so the generated modules import each other as
``from tinker_core.proto import common_pb2`` and load as ``tinker_core.proto.<name>_pb2``. For
each ``<name>.proto`` it writes ``<name>_pb2.py``, ``<name>_pb2.pyi`` (types) and
``<name>_pb2_grpc.py`` (service stubs) next to it. The stubs are committed.

Usage (from the repository root)::

    uv run --no-sync python scripts/gen_protos.py          # regenerate in place
    uv run --no-sync python scripts/gen_protos.py --check  # exit 1 when the committed stubs are stale

The output depends on the grpcio-tools version (it embeds the protobuf and grpc versions and the
stubs check them at import), so the script refuses to run with any other version than the one
pinned in the root ``pyproject.toml`` dev group.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import sys
import tempfile
from importlib import metadata, resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC_DIR = ROOT / "packages" / "tinker-core" / "src"
PROTO_DIR = SRC_DIR / "tinker_core" / "proto"
PINNED_GRPCIO_TOOLS = "1.85.1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files() -> list[Path]:
    """The .proto sources, sorted (paths relative to the include root)."""
    protos = sorted(p.relative_to(SRC_DIR) for p in PROTO_DIR.glob("*.proto"))
    if not protos:
        raise SystemExit(f"gen_protos: no .proto files in {PROTO_DIR}")
    return protos


def generated_names(protos: list[Path]) -> list[str]:
    return sorted(p.stem + suffix for p in protos for suffix in GENERATED_SUFFIXES)


def check_tools_version() -> None:
    try:
        version = metadata.version("grpcio-tools")
    except metadata.PackageNotFoundError:
        raise SystemExit(
            "gen_protos: grpcio-tools is not installed; run `uv sync` (it is in the root dev group)"
        ) from None
    if version != PINNED_GRPCIO_TOOLS:
        raise SystemExit(
            f"gen_protos: grpcio-tools {version} is installed but the stubs are generated with "
            f"{PINNED_GRPCIO_TOOLS} (the pin in the root pyproject.toml); run `uv sync --locked`"
        )


def generate(out_dir: Path) -> Path:
    """Run protoc into ``out_dir``; return the folder that holds the generated modules."""
    from grpc_tools import protoc

    well_known = resources.files("grpc_tools") / "_proto"
    protos = proto_files()
    args = [
        "grpc_tools.protoc",
        f"--proto_path={SRC_DIR}",
        f"--proto_path={well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(p.as_posix() for p in protos),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"gen_protos: protoc failed with exit code {rc} (see its message above)")
    generated = out_dir / "tinker_core" / "proto"
    names = sorted(p.name for p in generated.iterdir())
    if names != generated_names(protos):
        raise SystemExit(f"gen_protos: protoc wrote {names}, expected {generated_names(protos)}")
    return generated


def committed_names() -> list[str]:
    return sorted(
        p.name for p in PROTO_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES)
    )


def check(fresh: Path) -> int:
    """Compare freshly generated stubs with the committed ones; print what differs."""
    stale: list[str] = []
    fresh_names = sorted(p.name for p in fresh.iterdir())
    for name in sorted(set(fresh_names) | set(committed_names())):
        new, old = fresh / name, PROTO_DIR / name
        if not old.exists():
            stale.append(f"missing: {old.relative_to(ROOT)}")
            continue
        if not new.exists():
            stale.append(f"left over (its .proto is gone): {old.relative_to(ROOT)}")
            continue
        old_text, new_text = old.read_text(), new.read_text()
        if old_text != new_text:
            diff = difflib.unified_diff(
                old_text.splitlines(keepends=True),
                new_text.splitlines(keepends=True),
                f"committed/{name}",
                f"generated/{name}",
                n=1,
            )
            stale.append(f"differs: {old.relative_to(ROOT)}\n" + "".join(list(diff)[:40]))
    if stale:
        print("gen_protos: the committed stubs are stale:", file=sys.stderr)
        for item in stale:
            print("  " + item, file=sys.stderr)
        print(
            "regenerate them with `uv run --no-sync python scripts/gen_protos.py` and commit",
            file=sys.stderr,
        )
        return 1
    print(f"gen_protos: {len(fresh_names)} generated files are up to date")
    return 0


def write(fresh: Path) -> None:
    """Replace the committed stubs with the fresh ones (removing stubs of deleted protos)."""
    fresh_names = {p.name for p in fresh.iterdir()}
    for name in committed_names():
        if name not in fresh_names:
            (PROTO_DIR / name).unlink()
            print(f"removed {name}")
    for name in sorted(fresh_names):
        shutil.copyfile(fresh / name, PROTO_DIR / name)
    print(f"gen_protos: wrote {len(fresh_names)} files to {PROTO_DIR.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary folder and exit 1 if the committed stubs differ",
    )
    args = parser.parse_args(argv)
    check_tools_version()
    with tempfile.TemporaryDirectory(prefix="gen_protos-") as tmp:
        fresh = generate(Path(tmp))
        if args.check:
            return check(fresh)
        write(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
