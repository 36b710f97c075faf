"""The report directory of ``opentinker compare``: ``report.json``, ``report.md``, ``curves.png``.

``report.json`` holds every number: per job (variant, seed, run dir, its numbers and eval
curve), per variant (each metric's mean, 95% t interval, min, max over seeds, IQM from 5 seeds,
and the mean curve) and each variant's differences from the baseline variant (with their
intervals, method and a plain note). ``report.md`` shows the differences first, then one table
per metric and one line per job naming its run dir; ``curves.png`` the mean eval curve of each
variant with its min-max band over seeds.

Several metrics (the compare file's ``metrics:``): ``report.json`` keeps the shape above for the
first (``metric``, ``variants``, ``differences``, ``jobs``), lists them all in ``metrics`` and
holds each other one's ``variants``, ``differences`` and ``jobs`` (variant, seed and its numbers)
under ``more_metrics[<metric>]``; ``report.md`` gives one section per metric (its differences,
then its tables); ``curves.png`` one panel per metric.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_algos.compare.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    METHOD,
    MIN_SEEDS_ROBUST,
    MIN_SEEDS_TO_CONCLUDE,
)
from tinker_algos.compare.summary import DIFFERENCE_METRICS, METRICS, differences, variant_numbers

if TYPE_CHECKING:
    from tinker_algos.compare.runner import Outcome
    from tinker_algos.compare.spec import CompareSpec

TITLES = {
    "warm_start": "{key} of the warm start (where the last stage starts)",
    "final": "final {key}",
    "gain": "gain over the warm start (final - warm start) of {key}",
    "dip": "largest fall below the warm start of {key} (0: never below)",
    "best": "best {key}",
    "auc": "area under the {key} curve (per step)",
    "steps_to_+10": "steps into the last stage to +10 points of {key} over the warm start",
    "steps_to_+20": "steps into the last stage to +20 points of {key} over the warm start",
    "steps_per_s": "training steps per second",
}


def metric_section(key: str, variants: dict[str, list[str]], jobs: list[dict[str, Any]], baseline: str) -> dict[str, Any]:
    """One metric's part of the report: ``variants`` (each one's overrides and
    :func:`~tinker_algos.compare.summary.variant_numbers`) and ``differences`` from ``baseline``."""
    return {
        "variants": {
            name: {"overrides": overrides, **variant_numbers([j for j in jobs if j["variant"] == name])}
            for name, overrides in variants.items()
        },
        "differences": differences(jobs, baseline) if len(variants) > 1 else {},
    }


def build_report(
    *, compare_file: str, base: str, key: str, seeds: list[int], variants: dict[str, list[str]], jobs: list[dict[str, Any]],
    baseline: str | None = None, more: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The ``report.json`` document: ``variants`` maps each name to its overrides, ``jobs`` holds
    each job's ``variant``, ``seed``, ``run_dir`` and :func:`~tinker_algos.compare.summary.job_numbers`
    of the metric ``key``; ``baseline`` (default: the first variant) is the variant the others
    are compared with. ``more``: the jobs' numbers of each further metric (``{metric: jobs}``,
    each job with its ``variant`` and ``seed``), reported under ``more_metrics``."""
    baseline = baseline or next(iter(variants))
    first = metric_section(key, variants, jobs, baseline)
    return {
        "compare_file": compare_file,
        "base": base,
        "metric": key,
        "metrics": [key, *(more or {})],
        "seeds": seeds,
        "baseline": baseline,
        "intervals": {
            "method": METHOD, "confidence": CONFIDENCE, "min_seeds_to_conclude": MIN_SEEDS_TO_CONCLUDE,
            "min_seeds_iqm_poi": MIN_SEEDS_ROBUST, "bootstrap_resamples": BOOTSTRAP_RESAMPLES, "bootstrap_seed": BOOTSTRAP_SEED,
        },
        "variants": first["variants"],
        "differences": first["differences"],
        "jobs": jobs,
        "more_metrics": {m: {**metric_section(m, variants, m_jobs, baseline), "jobs": m_jobs} for m, m_jobs in (more or {}).items()},
    }


def sections(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(metric, its variants, differences and jobs)`` for every metric of ``report``, the first first
    (a report written before ``metrics`` existed has one)."""
    return [(report["metric"], report), *report.get("more_metrics", {}).items()]


def _num(v: float | None, metric: str) -> str:
    if v is None:
        return "-"
    if metric.startswith("steps_to"):  # steps: whole ones, a mean to a tenth
        return f"{v:.1f}".removesuffix(".0")
    return f"{v:.4g}"


def _ci(low: float | None, high: float | None, metric: str) -> str:
    return "-" if low is None or high is None else f"[{_num(low, metric)}, {_num(high, metric)}]"


def _difference_lines(report: dict[str, Any], section: dict[str, Any], h: str) -> list[str]:
    diffs = section.get("differences") or {}
    if not diffs:
        return []
    conf = report["intervals"]["confidence"]
    lines = ["", f"{h} differences from the baseline `{report['baseline']}` (variant - baseline)", "",
             f"| variant | number | difference | {conf:.0%} CI | method | P(improvement) [{conf:.0%} CI] | note |",
             "|---|---|---|---|---|---|---|"]
    for name, by_metric in diffs.items():
        for metric in DIFFERENCE_METRICS:
            d = by_metric.get(metric)
            if d is None:
                continue
            n = d["n"] if isinstance(d["n"], int) else "/".join(map(str, d["n"]))
            poi = "-" if d["poi"] is None else f"{d['poi']:.2f} {_ci(d['poi_low'], d['poi_high'], 'poi')}"
            lines.append(f"| {name} | {metric} | {_num(d['mean'], metric)} | {_ci(d['ci_low'], d['ci_high'], metric)} "
                         f"| {d['method']}, n={n} | {poi} | {d['note']} |")
    return lines


def _metric_lines(report: dict[str, Any], key: str, section: dict[str, Any], h: str) -> list[str]:
    """One metric's differences and tables, headed ``h`` (``##``; ``###`` under a metric's own heading)."""
    n_seeds = len(report["seeds"])
    lines = _difference_lines(report, section, h)
    for metric in METRICS:
        lines += ["", f"{h} {TITLES[metric].format(key=key)}", "", "| variant | mean | 95% CI | min | max | IQM [95% CI] | seeds |",
                  "|---|---|---|---|---|---|---|"]
        for name, v in section["variants"].items():
            d = v[metric]
            if d["n"] == 0:
                lines.append(f"| {name} | not reached | - | - | - | - | 0/{n_seeds} |")
                continue
            iqm = "-" if d.get("iqm") is None else f"{_num(d['iqm'], metric)} {_ci(d['iqm_low'], d['iqm_high'], metric)}"
            lines.append(f"| {name} | {_num(d['mean'], metric)} | {_ci(d['ci_low'], d['ci_high'], metric)} | {_num(d['min'], metric)} "
                         f"| {_num(d['max'], metric)} | {iqm} | {d['n']}/{n_seeds} |")
        if metric == "warm_start":
            firsts = sorted({f"{j['variant']}/seed-{j['seed']}" for j in section["jobs"] if j.get("warm_start_from") == "first eval of the stage"})
            if firsts:
                lines += ["", f"No evaluation before the last stage for {', '.join(firsts)}: their first eval point stands for the warm start."]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    metrics = sections(report)
    named = ", ".join(f"`{key}`" for key, _ in metrics)
    lines = [
        f"# compare: {report['compare_file']}",
        "",
        f"Base job: `{report['base']}`; seeds: {', '.join(map(str, report['seeds']))}; held-out "
        f"{'metric' if len(metrics) == 1 else 'metrics (a section each)'}: {named} "
        f"(the eval points of the last stage; the warm start's level is its last value before the stage). "
        f"Intervals ({report['intervals']['confidence']:.0%}): {report['intervals']['method']}. "
        f"With fewer than {report['intervals']['min_seeds_to_conclude']} seeds a difference is not concluded.",
        "",
        "| variant | overrides |",
        "|---|---|",
    ]
    for name, v in report["variants"].items():
        base = " (baseline)" if name == report.get("baseline") else ""
        lines.append(f"| {name}{base} | {'<br>'.join(f'`{o}`' for o in v['overrides']) or '(the base)'} |")
    if len(metrics) == 1:
        lines += _metric_lines(report, *metrics[0], "##")
    for key, section in metrics if len(metrics) > 1 else ():
        lines += ["", f"## `{key}`"] + _metric_lines(report, key, section, "###")
    lines += ["", "## jobs", ""]
    lines += [f"- {j['variant']} seed {j['seed']}: {j['run_dir']}" + (f" (job {j['job_id']})" if j.get("job_id") else "") for j in report["jobs"]]
    return "\n".join(lines) + "\n"


def plot_report(report: dict[str, Any], path: Path) -> Path | None:
    """``curves.png``: each variant's mean eval curve over steps with its min-max band; None
    without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = sections(report)
    cols = 1 if len(metrics) == 1 else 2
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4.5 * rows), squeeze=False)
    for ax, (key, section) in zip(axes.flat, metrics, strict=False):
        for name, v in section["variants"].items():
            c = v["curve"]
            if not c["steps"]:
                continue
            (line,) = ax.plot(c["steps"], c["mean"], marker="o" if len(c["steps"]) < 30 else None, markersize=3, label=name)
            ax.fill_between(c["steps"], c["min"], c["max"], color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel("step of the last stage")
        ax.set_ylabel(key)
        ax.set_title(f"mean {key} over {len(report['seeds'])} seed(s), band: min-max", fontsize=10 if cols == 1 else 8)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


REPORT_FILES = ("report.json", "report.md", "curves.png")
"""What :func:`write_report` writes into the output directory."""
MARKER = ".opentinker-compare"
"""The file that says an output directory is a compare's: its report files may be rewritten."""


def check_output(out: Path) -> None:
    """Claim ``out`` for a compare, before any job runs: a :class:`CompareError` when it holds a
    report file (:data:`REPORT_FILES`) that no compare wrote (no :data:`MARKER`, no compare
    ``report.json``), so that ``output: .`` cannot overwrite your own ``report.md``; else write
    the marker."""
    from tinker_algos.compare.spec import CompareError

    if not (out / MARKER).is_file():
        try:
            earlier = json.loads((out / "report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            earlier = None
        ours = isinstance(earlier, dict) and {"variants", "jobs"} <= set(earlier)  # written before the marker existed
        theirs = [] if ours else [name for name in REPORT_FILES if (out / name).exists()]
        if theirs:
            raise CompareError(f"{out} holds {', '.join(theirs)}, which opentinker compare did not write; it would "
                               "overwrite them: give another --output (or output: in the compare file), or move them")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("this directory holds an opentinker compare: its report files are rewritten by each run\n",
                              encoding="utf-8")


def write_report(report: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``curves.png`` (without matplotlib: no PNG) into
    ``out`` (claimed by :func:`check_output` first)."""
    check_output(out)
    written = {"json": out / "report.json", "md": out / "report.md"}
    written["json"].write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    written["md"].write_text(render_markdown(report), encoding="utf-8")
    png = plot_report(report, out / "curves.png")
    if png is not None:
        written["png"] = png
    return written


def report_of(spec: CompareSpec, outcomes: list[Outcome], *, warm_start: float | None = None) -> dict[str, Any]:
    """The report of a compare (a :class:`~tinker_algos.compare.spec.CompareSpec`) whose jobs all
    completed (:class:`~tinker_algos.compare.runner.Outcome` each); ``warm_start``: the held-out
    level every job starts from when it was measured outside the jobs (a warm start trained
    once and given as ``model.name``), else each job's own eval before its last stage (with
    several ``metrics``, it is the first metric's). The metrics are the compare file's
    ``metrics`` (else :func:`~tinker_algos.compare.summary.eval_key`); one that a job did not log
    in its last stage is a ValueError naming the metric and the job."""
    from tinker_algos.compare.summary import eval_key, job_numbers, last_stage_start

    keys = list(spec.metrics) or [eval_key([o.rows for o in outcomes])]
    by_metric: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
    for o in outcomes:
        start = last_stage_start(spec.configs[o.job.variant], o.rows)
        for key in keys:
            try:
                numbers = job_numbers(o.rows, key, start, warm=warm_start if key == keys[0] else None)
            except ValueError as e:
                raise ValueError(f"metric {key!r}: job {o.job.key} ({o.run_dir}): {e}; list only metrics that every job logs "
                                 "in its last stage (metrics: in the compare file)") from None
            by_metric[key].append({"variant": o.job.variant, "seed": o.job.seed, "run_dir": o.run_dir, "job_id": o.job_id, **numbers})
    first, *others = keys
    return build_report(
        compare_file=str(spec.path), base=spec.base_source, key=first, seeds=list(spec.seeds),
        variants={v.name: v.override_texts for v in spec.variants}, jobs=by_metric[first], baseline=spec.baseline,
        more={key: by_metric[key] for key in others},
    )
