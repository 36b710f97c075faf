"""Render the Helm chart (deploy/helm/opentinker) into deploy/kubernetes/, its rendered example.

    python scripts/render_chart.py          # write deploy/kubernetes/*.yaml
    python scripts/render_chart.py --check  # exit 1 naming the files that differ from the chart

The chart is the source; the files in deploy/kubernetes/ are what ``helm template`` makes of it
(for ``kubectl apply``), and a test fails when they are stale. Rendering uses Helm's own Go
engine through the ``helm-python-sdk`` wheel (a dev dependency: ``libhelm_c``, Helm v4's SDK,
no ``helm`` binary and no network), so the output is exactly ``helm template``'s.

Two renders make the example: the chart's defaults (plus the Namespace and monitoring, which
``helm install`` users switch on with flags) give every file; ``values-gpu-cluster.yaml`` gives
``30-raycluster-gpu.yaml`` (the same cluster with GPU worker groups: apply one of the two).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "opentinker"
OUT = ROOT / "deploy" / "kubernetes"
RELEASE = "opentinker"
NAMESPACE = "opentinker"
#: What the example adds to a values file: objects a ``helm install`` makes with flags instead.
EXAMPLE_SETS: dict[str, Any] = {"namespace": {"create": True}, "monitoring": {"enabled": True}}
#: file in deploy/kubernetes -> (values file of the chart or None for the defaults, template).
EXAMPLE = {
    "00-namespace.yaml": (None, "00-namespace.yaml"),
    "10-secrets.yaml": (None, "10-secrets.yaml"),
    "20-storage.yaml": (None, "20-storage.yaml"),
    "30-raycluster-cpu.yaml": (None, "30-raycluster.yaml"),
    "30-raycluster-gpu.yaml": ("values-gpu-cluster.yaml", "30-raycluster.yaml"),
    "40-scheduler.yaml": (None, "40-scheduler.yaml"),
    "50-monitoring.yaml": (None, "50-monitoring.yaml"),
}
HEADER = (
    "# Rendered from the Helm chart deploy/helm/opentinker by scripts/render_chart.py:\n"
    "#   helm template {release} deploy/helm/opentinker -n {namespace}{values} \\\n"
    "#     --set namespace.create=true --set monitoring.enabled=true\n"
    "# Do not edit: change the chart (or its values) and run the script again.\n"
)


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``, maps merged key by key (lists replaced), as Helm merges values."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def values_of(values_file: str | None, sets: dict[str, Any] | None = None) -> dict[str, Any]:
    values = yaml.safe_load((CHART / values_file).read_text()) if values_file else {}
    return merge(values or {}, sets or {})


def render(values: dict[str, Any], *, release: str = RELEASE, namespace: str = NAMESPACE) -> dict[str, str]:
    """Template name (``30-raycluster.yaml``) -> its rendered text, as ``helm template`` makes it."""
    import helm_python

    with helm_python.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    return {Path(path).name: text for path, text in rendered.items()}


def lint(values: dict[str, Any]) -> list[str]:
    """``helm lint --strict`` of the chart with ``values``: its warnings and errors, one line each."""
    import helm_python

    report = helm_python.lint(str(CHART), values, strict=True, namespace=NAMESPACE, kube_version="v1.31.0")
    found = [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
    return found + list(report.get("errors") or [])


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def example() -> dict[str, str]:
    """File name in deploy/kubernetes -> the text it should hold."""
    renders: dict[str | None, dict[str, str]] = {}
    files = {}
    for name, (values_file, template) in EXAMPLE.items():
        if values_file not in renders:
            renders[values_file] = render(values_of(values_file, EXAMPLE_SETS))
        flag = f" -f deploy/helm/opentinker/{values_file}" if values_file else ""
        header = HEADER.format(release=RELEASE, namespace=NAMESPACE, values=flag)
        files[name] = header + renders[values_file][template].strip("\n") + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 naming stale files")
    args = parser.parse_args(argv)
    wanted = example()
    stale = [name for name, text in wanted.items() if not (OUT / name).is_file() or (OUT / name).read_text() != text]
    extra = sorted(p.name for p in OUT.glob("*.yaml") if p.name not in wanted)
    if args.check:
        for name in stale:
            print(f"deploy/kubernetes/{name} differs from the chart: run python scripts/render_chart.py")
        for name in extra:
            print(f"deploy/kubernetes/{name} is not rendered from the chart: move it into the chart")
        return 1 if stale or extra else 0
    for name in stale:
        (OUT / name).write_text(wanted[name])
        print(f"wrote deploy/kubernetes/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
