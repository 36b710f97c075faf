"""The scheduler's Prometheus metrics (prometheus-client), in a registry of its own.

Exposed on ``--metrics-port`` at ``/metrics``. Scheduler-wide series carry no job ids or tenant
names; the ``opentinker_job_*`` gauges carry ``job`` and ``tenant`` labels, exist only while the
job runs (removed when it stops, so cardinality stays at the number of running jobs), and show
its last reported value. The endpoint is for the operator: serve it where tenants cannot read it.

==================================================  =========  ====================================
``opentinker_jobs{state}``                          gauge      jobs in each state (from the store)
``opentinker_queue_depth``                          gauge      queued jobs
``opentinker_queue_oldest_wait_seconds``            gauge      how long the oldest queued job waits
``opentinker_queue_wait_seconds``                   histogram  queued -> running, per start
``opentinker_step_seconds``                         histogram  wall time per training step
``opentinker_tokens_per_second``                    gauge      sum over running jobs of the last
                                                               reported ``*tokens_per_s`` metric
``opentinker_rollout_errors_total{reason}``         counter    reported ``rollout/errors/<reason>``
``opentinker_actor_restarts_total``                 counter    job actors restarted after dying
``opentinker_jobs_finished_total{state}``           counter    jobs that reached a terminal state
``opentinker_resources_free{resource}``             gauge      cpus, gpus, memory_gb not held
``opentinker_job_reward{job,tenant}``               gauge      ``env/reward_mean``
``opentinker_job_loss{job,tenant}``                 gauge      ``losses/total``
``opentinker_job_tokens_per_second{job,tenant}``    gauge      ``rollout/tokens_per_s`` (or another
                                                               ``*tokens_per_s`` key)
``opentinker_job_step_seconds{job,tenant}``         gauge      ``time/step_s``: the last step's time
``opentinker_job_last_step_timestamp_seconds``      gauge      Unix time of the job's last reported
``{job,tenant}``                                               step (its start, before the first)
``opentinker_job_eval_score{job,tenant,metric}``    gauge      the last held-out ``eval/accuracy``
                                                               (metric ``accuracy``) or
                                                               ``eval/reward_mean`` (``reward_mean``)
``opentinker_job_eval_consecutive_falls``           gauge      how many evaluations in a row that
``{job,tenant,metric}``                                        score fell (0 after a rise)
``opentinker_host_memory_used_bytes{host}``         gauge      working set of each host (Ray node
                                                               or pod) running a job, and the
                                                               scheduler's own
``opentinker_host_memory_limit_bytes{host}``        gauge      its memory limit (the cgroup's, else
                                                               the machine's)
``opentinker_resources_total{resource}``            gauge      cpus, gpus, memory_gb the scheduler
                                                               may use
``opentinker_build_info{version,wire}``             gauge      1; the scheduler's package and
                                                               wire-protocol versions
==================================================  =========  ====================================

The alerting rules that read these series are in ``deploy/helm/opentinker/files/prometheus-rules.yaml``
(documented in ``docs/guides/kubernetes.md``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tinker_core.handshake import WIRE_VERSION, package_version
from tinker_scheduler import host_memory
from tinker_scheduler.store import TERMINAL_STATES, JobState, JobStore

#: Metric key prefix of per-reason rollout error counts in a step (``rollout/errors/timeout``);
#: a plain ``rollout/errors`` counts under reason ``all``.
ROLLOUT_ERRORS = "rollout/errors"
TOKENS_PER_S = "rollout/tokens_per_s"
#: Reported metric key -> (the per-job gauge showing its last value, its help text).
JOB_GAUGES = {
    "env/reward_mean": ("opentinker_job_reward", "A running job's last reported mean reward (env/reward_mean)."),
    "losses/total": ("opentinker_job_loss", "A running job's last reported loss (losses/total)."),
    TOKENS_PER_S: ("opentinker_job_tokens_per_second", "A running job's last reported tokens per second."),
    "time/step_s": ("opentinker_job_step_seconds", "A running job's last step's wall-clock seconds (time/step_s)."),
}

#: Held-out score keys -> the ``metric`` label of ``opentinker_job_eval_*``.
EVAL_SCORES = {"eval/accuracy": "accuracy", "eval/reward_mean": "reward_mean"}


class _StoreCollector(Collector):
    """Job counts per state and the oldest queued job's wait, read from the store at scrape time."""

    def __init__(self, store: JobStore) -> None:
        self._store = store

    def collect(self) -> Iterator[Any]:
        counts = self._store.counts_by_state()
        jobs = GaugeMetricFamily("opentinker_jobs", "Jobs in each state.", labels=["state"])
        for state, n in counts.items():
            jobs.add_metric([state.name], n)
        yield jobs
        yield GaugeMetricFamily("opentinker_queue_depth", "Jobs waiting in the queue.", value=counts[JobState.QUEUED])
        queued = self._store.in_state(JobState.QUEUED, with_config=False)
        oldest = max((time.time() - j.queued_at for j in queued), default=0.0)
        yield GaugeMetricFamily(
            "opentinker_queue_oldest_wait_seconds", "How long the oldest queued job has waited.", value=oldest
        )


class _HostCollector(Collector):
    """Memory used and allowed per host: the hosts running jobs (from their last reports) and the
    scheduler's own, read at scrape time."""

    def __init__(self, hosts: Callable[[], dict[str, tuple[float, float]]]) -> None:
        self._hosts = hosts

    def collect(self) -> Iterator[Any]:
        hosts = dict(self._hosts())
        own = host_memory.report()
        if own is not None:
            hosts[str(own["name"])] = (float(own["used"]), float(own["limit"]))  # type: ignore[arg-type]
        used = GaugeMetricFamily("opentinker_host_memory_used_bytes",
                                 "Memory a host running jobs (or the scheduler) uses: its working set.", labels=["host"])
        limit = GaugeMetricFamily("opentinker_host_memory_limit_bytes",
                                  "A host's memory limit: its cgroup's (a pod's limit), else the machine's.", labels=["host"])
        for name, (u, lim) in sorted(hosts.items()):
            used.add_metric([name], u)
            limit.add_metric([name], lim)
        yield used
        yield limit


class SchedulerMetrics:
    """The metrics one scheduler updates; :attr:`registry` is what the HTTP endpoint serves."""

    def __init__(self, store: JobStore, free_resources: Callable[[], Any] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_StoreCollector(store))
        self._host_of_job: dict[str, tuple[str, float, float]] = {}
        self.registry.register(_HostCollector(self._hosts))
        self.queue_wait = Histogram(
            "opentinker_queue_wait_seconds",
            "Seconds a job waited in the queue before it started.",
            buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600),
            registry=self.registry,
        )
        self.step_time = Histogram(
            "opentinker_step_seconds",
            "Wall-clock seconds per training step.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.tokens_per_second = Gauge(
            "opentinker_tokens_per_second",
            "Sum over running jobs of their last reported tokens per second.",
            registry=self.registry,
        )
        self.rollout_errors = Counter(
            "opentinker_rollout_errors",
            "Rollout errors reported by jobs (metrics rollout/errors/<reason>).",
            labelnames=["reason"],
            registry=self.registry,
        )
        self.actor_restarts = Counter(
            "opentinker_actor_restarts", "Job actors restarted after they died.", registry=self.registry
        )
        self.jobs_finished = Counter(
            "opentinker_jobs_finished",
            "Jobs that reached a terminal state.",
            labelnames=["state"],
            registry=self.registry,
        )
        for state in sorted(TERMINAL_STATES, key=lambda s: s.name):  # 0 from the start: increase() sees the first one
            self.jobs_finished.labels(state.name)
        self.resources_free = Gauge(
            "opentinker_resources_free",
            "Cluster resources not held by running jobs.",
            labelnames=["resource"],
            registry=self.registry,
        )
        self.resources_total = Gauge(
            "opentinker_resources_total",
            "Cluster resources the scheduler may use (held or not).",
            labelnames=["resource"],
            registry=self.registry,
        )
        self._tokens_by_job: dict[str, float] = {}
        self._store = store
        self._tenant_of: dict[str, str] = {}
        self.per_job = {
            key: Gauge(name, doc, labelnames=["job", "tenant"], registry=self.registry)
            for key, (name, doc) in JOB_GAUGES.items()
        }
        self._add_alert_series()

    def _add_alert_series(self) -> None:
        """The series the training alerts read (deploy/helm/opentinker/files/prometheus-rules.yaml)."""
        self.last_step_time = Gauge(
            "opentinker_job_last_step_timestamp_seconds",
            "Unix time of a running job's last reported step (its start before the first step).",
            labelnames=["job", "tenant"],
            registry=self.registry,
        )
        self.eval_score = Gauge(
            "opentinker_job_eval_score",
            "A running job's last held-out score (metric: accuracy = eval/accuracy, reward_mean = eval/reward_mean).",
            labelnames=["job", "tenant", "metric"],
            registry=self.registry,
        )
        self.eval_falls = Gauge(
            "opentinker_job_eval_consecutive_falls",
            "How many evaluations in a row a running job's held-out score fell (0 after it rose).",
            labelnames=["job", "tenant", "metric"],
            registry=self.registry,
        )
        self._evals: dict[tuple[str, str], tuple[float, int]] = {}
        Gauge("opentinker_build_info", "1; the scheduler's OpenTinker version and wire-protocol version.",
              labelnames=["version", "wire"], registry=self.registry).labels(package_version("tinker-scheduler"), WIRE_VERSION).set(1)

    def observe_metrics(self, job_id: str, values: dict[str, float]) -> None:
        """Update the derived metrics from one step's reported metrics."""
        for key, value in values.items():
            if key == ROLLOUT_ERRORS or key.startswith(ROLLOUT_ERRORS + "/"):
                reason = key[len(ROLLOUT_ERRORS) + 1:] or "all"
                if value > 0:
                    self.rollout_errors.labels(reason).inc(value)
        tokens = values.get("rollout/tokens_per_s")
        if tokens is None:
            tokens = next((v for k, v in values.items() if k.endswith("tokens_per_s")), None)
        if tokens is not None:
            self._tokens_by_job[job_id] = float(tokens)
            self.tokens_per_second.set(sum(self._tokens_by_job.values()))
        self.last_step_time.labels(job_id, self._tenant(job_id)).set(time.time())
        self._observe_evals(job_id, values)
        shown = {key: values.get(key) for key in JOB_GAUGES}
        shown[TOKENS_PER_S] = tokens
        shown = {k: float(v) for k, v in shown.items() if v is not None}
        if shown:
            tenant = self._tenant(job_id)
            for key, value in shown.items():
                self.per_job[key].labels(job_id, tenant).set(value)

    def _observe_evals(self, job_id: str, values: dict[str, float]) -> None:
        """Count the evaluations in a row whose held-out score fell (an equal score counts as neither,
        so the step a resumed job reports again changes nothing)."""
        for key, metric in EVAL_SCORES.items():
            if key not in values:
                continue
            value = float(values[key])
            last = self._evals.get((job_id, metric))
            falls = 0 if last is None else last[1] + 1 if value < last[0] else last[1] if value == last[0] else 0
            self._evals[(job_id, metric)] = (value, falls)
            tenant = self._tenant(job_id)
            self.eval_score.labels(job_id, tenant, metric).set(value)
            self.eval_falls.labels(job_id, tenant, metric).set(falls)

    def job_started(self, job_id: str) -> None:
        """A job started running: the clock of ``opentinker_job_last_step_timestamp_seconds`` starts."""
        self.last_step_time.labels(job_id, self._tenant(job_id)).set(time.time())

    def observe_host(self, job_id: str, host: dict[str, Any] | None) -> None:
        """The memory of the host a job's report came from (``host_memory.report()``)."""
        if host:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                self._host_of_job[job_id] = (str(host["name"]), float(host["used"]), float(host["limit"]))

    def _hosts(self) -> dict[str, tuple[float, float]]:
        return {name: (used, limit) for name, used, limit in list(self._host_of_job.values())}

    def _tenant(self, job_id: str) -> str:
        if job_id not in self._tenant_of:
            job = self._store.get(job_id)
            self._tenant_of[job_id] = job.tenant if job is not None else ""
        return self._tenant_of[job_id]

    def job_stopped(self, job_id: str) -> None:
        """Forget a job that no longer runs (its throughput leaves the sum)."""
        if self._tokens_by_job.pop(job_id, None) is not None:
            self.tokens_per_second.set(sum(self._tokens_by_job.values()))
        tenant = self._tenant_of.pop(job_id, None)
        if tenant is not None:
            for gauge in [*self.per_job.values(), self.last_step_time]:
                with contextlib.suppress(KeyError):  # a gauge the job never reported
                    gauge.remove(job_id, tenant)
            for metric in EVAL_SCORES.values():
                if self._evals.pop((job_id, metric), None) is not None:
                    self.eval_score.remove(job_id, tenant, metric)
                    self.eval_falls.remove(job_id, tenant, metric)
        self._host_of_job.pop(job_id, None)

    def set_free(self, cpus: float, gpus: float, memory_gb: float) -> None:
        self.resources_free.labels("cpus").set(cpus)
        self.resources_free.labels("gpus").set(gpus)
        self.resources_free.labels("memory_gb").set(memory_gb)

    def set_total(self, cpus: float, gpus: float, memory_gb: float) -> None:
        self.resources_total.labels("cpus").set(cpus)
        self.resources_total.labels("gpus").set(gpus)
        self.resources_total.labels("memory_gb").set(memory_gb)
