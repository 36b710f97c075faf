"""The wire side of JobService: stored jobs and events as messages, a config text decoded (YAML
or JSON, its shape checked before it is parsed as a config), List's page tokens, and the
resources a job config reserves. No gRPC calls here: :mod:`tinker_scheduler.job_service` uses these.
"""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import yaml
from google.protobuf.timestamp_pb2 import Timestamp

from tinker_core.config import CONFIG_TOO_DEEP, JobConfig, check_config_shape
from tinker_core.errors import ConfigError
from tinker_core.proto import jobs_pb2
from tinker_scheduler.policy import Resources
from tinker_scheduler.store import Event, JobRecord, JobState

#: The largest cursor the store can hold; a larger ``after_cursor`` means the same: no event after it.
MAX_CURSOR = 2**63 - 1


def timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def job_message(job: JobRecord) -> jobs_pb2.Job:
    """The wire form of a stored job."""
    message = jobs_pb2.Job(
        id=job.id,
        state=cast(Any, int(job.state)),
        reason=job.reason,
        priority=job.priority,
        tenant=job.tenant,
        created_at=timestamp(job.created_at),
        run_dir=job.run_dir,
        checkpoint_path=job.checkpoint_path,
        config_text=job.config_text,
        config_format=cast(Any, job.config_format),
        client_request_id=job.client_request_id,
        name=job.name,
    )
    if job.started_at is not None:
        message.started_at.CopyFrom(timestamp(job.started_at))
    if job.finished_at is not None:
        message.finished_at.CopyFrom(timestamp(job.finished_at))
    return message


def event_message(event: Event) -> jobs_pb2.JobEvent:
    """The wire form of a stored event."""
    message = jobs_pb2.JobEvent(cursor=event.cursor, job_id=event.job_id, time=timestamp(event.time))
    p = event.payload
    if event.kind == "state":
        message.state_change.CopyFrom(
            jobs_pb2.JobStateChange(previous_state=p["previous"], state=p["state"], reason=p.get("reason", ""))
        )
    elif event.kind == "metrics":
        message.metrics.CopyFrom(jobs_pb2.JobMetrics(step=int(p["step"]), values=p.get("values", {})))
    else:
        message.log.CopyFrom(
            jobs_pb2.JobLogLine(source=p.get("source", ""), level=p.get("level", ""), text=p.get("text", ""))
        )
    return message


def parse_config_text(text: str, config_format: int) -> tuple[Any, int]:
    """Decode ``config_text`` as YAML or JSON; returns ``(data, detected format)``.

    Raises :class:`ValueError` naming what is wrong, also for a text nested deeper than
    :data:`tinker_core.config.MAX_CONFIG_DEPTH` or whose YAML aliases expand to more values than
    it has bytes (an alias bomb): :func:`tinker_core.config.check_config_shape`, which
    :func:`tinker_core.config.load_config` runs too.
    """
    try:
        data, detected = _decode_config_text(text, config_format)
    except RecursionError:
        raise ValueError(f"config_text: {CONFIG_TOO_DEEP}") from None
    except ValueError as e:
        message = str(e)
        raise ValueError(message if message.startswith("config_text:") else f"config_text: {message}") from None
    try:
        check_config_shape(data, len(text))
    except ConfigError as e:
        raise ValueError(f"config_text: {e.problems[0]}") from None
    return data, detected


def _decode_config_text(text: str, config_format: int) -> tuple[Any, int]:
    if not text.strip():
        raise ValueError("config_text: is empty; send the job config (the file 'opentinker train' reads) as YAML or JSON")
    if config_format == jobs_pb2.CONFIG_FORMAT_JSON:
        try:
            return json.loads(text), jobs_pb2.CONFIG_FORMAT_JSON
        except json.JSONDecodeError as e:
            raise ValueError(f"config_text: not valid JSON ({e}); fix it or send config_format YAML") from None
    if config_format == jobs_pb2.CONFIG_FORMAT_UNSPECIFIED:
        try:
            data = json.loads(text)
            if isinstance(data, dict):
                return data, jobs_pb2.CONFIG_FORMAT_JSON
        except json.JSONDecodeError:
            pass
    try:
        return yaml.safe_load(text), jobs_pb2.CONFIG_FORMAT_YAML
    except yaml.YAMLError as e:
        raise ValueError(f"config_text: not valid YAML ({e})") from None


def page_token(tenant: str, states: list[JobState], before_seq: int) -> str:
    """The token of the page after the job ``before_seq``, bound to the tenant and the filter."""
    payload = {"tenant": tenant, "states": sorted(int(s) for s in states), "before": before_seq}
    return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode()


def before_seq_of(token: str, tenant: str, states: list[JobState]) -> int | None:
    """The ``before_seq`` in ``token`` ("" -> None, the first page).

    Raises :class:`ValueError` when the token is not one :func:`page_token` made for this
    tenant (the same message for garbage and for another tenant's token) or for these states.
    """
    if not token:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
        before = payload["before"]
        valid = (payload["tenant"] == tenant and type(before) is int and 0 < before <= MAX_CURSOR
                 and isinstance(payload["states"], list))
    except (ValueError, TypeError, KeyError, UnicodeError, RecursionError):
        valid = False
    if not valid:
        raise ValueError(
            "page_token: not a token this server gave you; pass next_page_token from your previous page, or '' for the first"
        )
    if payload["states"] != sorted(int(s) for s in states):
        raise ValueError("page_token: was made for another states filter; send the first page's states, or '' to start again")
    return int(before)


def demand_of(config: JobConfig) -> Resources:
    """What a job reserves: ``resources.cpus``, ``gpus`` and ``memory_gb`` (None -> 0), plus
    those of each rollout worker and learner actor of its ``execution`` section."""
    r = config.resources
    total = Resources(cpus=r.cpus, gpus=r.gpus, memory_gb=r.memory_gb or 0.0)
    ex = config.execution
    for count, w in ((ex.rollout_workers, ex.rollout_worker), (ex.learners - 1, ex.learner)):
        total = total + Resources(cpus=count * w.num_cpus, gpus=count * w.num_gpus, memory_gb=count * (w.memory_gb or 0.0))
    return total
