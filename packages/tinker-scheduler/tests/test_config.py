"""SchedulerConfig and the keyword options of Scheduler; HostKey (no Ray, no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker_algos.tinker_ops import RequestLimits
from tinker_core.proto import MAX_MESSAGE_BYTES
from tinker_scheduler import Scheduler, SchedulerConfig
from tinker_scheduler.auth import AuthMode
from tinker_scheduler.host_pool import HostKey


def test_defaults_are_the_documented_ones_and_paths_become_paths(tmp_path):
    config = SchedulerConfig(db=str(tmp_path / "s.db"), auth="none")
    assert (config.host, config.port, config.max_jobs_per_host, config.max_retries) == ("127.0.0.1", 50051, 8, 3)
    assert config.max_message_bytes == MAX_MESSAGE_BYTES
    assert config.db == tmp_path / "s.db" and isinstance(config.db, Path)
    assert config.auth is AuthMode.NONE
    assert config.request_limits == RequestLimits()  # the TrainingService's limits default to tinker_ops'
    with pytest.raises(AttributeError):
        config.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"tls_cert": "c.pem"}, "tls_cert and tls_key"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_jobs_per_host": -1}, "max_jobs_per_host"),
        ({"auth": "sometimes"}, "sometimes"),
        ({"max_data_per_request": 0}, "max_data_per_request must be a whole number >= 1"),
        ({"max_tokens_per_request": -5}, "max_tokens_per_request"),
        ({"max_new_tokens_per_sample": 1.5}, "max_new_tokens_per_sample"),
    ],
)
def test_bad_options_are_named(options, named):
    with pytest.raises(ValueError, match=named):
        SchedulerConfig(**options)


def test_request_limit_options_become_the_training_services_limits():
    config = SchedulerConfig(max_data_per_request=2, max_tokens_per_request=300, max_new_tokens_per_sample=7)
    assert config.request_limits == RequestLimits(max_data=2, max_tokens=300, max_new_tokens=7)


def test_scheduler_takes_a_config_and_keyword_options_over_it(tmp_path):
    base = SchedulerConfig(db=tmp_path / "a.db", runs_dir=tmp_path / "runs", port=0)
    scheduler = Scheduler(base, paused=True, max_jobs_per_host=0)
    try:
        assert scheduler.config == SchedulerConfig(
            db=tmp_path / "a.db", runs_dir=tmp_path / "runs", port=0, paused=True, max_jobs_per_host=0
        )
        assert scheduler.db_path == tmp_path / "a.db" and scheduler.runs_dir == tmp_path / "runs"
    finally:
        scheduler.store.close()
    keywords = Scheduler(db=tmp_path / "b.db", port=0)  # the same as Scheduler(SchedulerConfig(...))
    try:
        assert keywords.config == SchedulerConfig(db=tmp_path / "b.db", port=0)
    finally:
        keywords.store.close()
    with pytest.raises(TypeError, match="SchedulerConfig"):
        Scheduler(db=tmp_path / "c.db", max_jobs=3)


def test_host_keys_name_the_same_base_weights_alike():
    a = HostKey.of("tiny", None, "", revision="", tokenizer=None)
    assert a == HostKey("tiny") == HostKey.of("tiny", "auto", "auto")
    assert {a: 1}[HostKey.of("tiny")] == 1  # hashable: hosts are kept by key
    assert HostKey.of("tiny", "bf16") != a
    assert HostKey.of("tiny", own="ts-1") != a  # a full fine-tuning session's own host
    assert str(HostKey.of("tiny", revision="v1")) == "tiny[revision=v1, auto, auto, lora]"


def test_a_job_config_is_parsed_once_and_kept_with_its_job():
    from tinker_core.config import JobConfig
    from tinker_scheduler.job_records import JobConfigs, JobRecord, JobState

    config = JobConfig.model_validate({"name": "j", "model": {"name": "tiny"}, "env": {"id": "echo/echo-v0"},
                                   "algorithm": {"name": "sft", "steps": 1}})
    fields = dict.fromkeys(JobRecord.__dataclass_fields__, 0)
    record = JobRecord(**{**fields, "id": "j1", "state": JobState.QUEUED, "config_json": config.model_dump_json()})
    configs = JobConfigs()
    configs.keep("j1", config)
    assert configs.of(record) is config  # what Submit parsed, not parsed again
    other = JobRecord(**{**fields, "id": "j2", "state": JobState.QUEUED, "config_json": config.model_dump_json()})
    first = configs.of(other)  # a job from before a restart: parsed from its record once
    assert first == config and configs.of(other) is first


def test_the_http_deadline_defaults_are_tinker_serves():
    http_limits = pytest.importorskip("tinker_core.http_limits", reason="tinker-serve is the http extra")
    from tinker_scheduler.config import HTTP_BODY_TIMEOUT_S, HTTP_HEADER_TIMEOUT_S

    assert (HTTP_HEADER_TIMEOUT_S, HTTP_BODY_TIMEOUT_S) == (http_limits.HEADER_TIMEOUT_S, http_limits.BODY_TIMEOUT_S)
