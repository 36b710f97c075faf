"""``logging.report_to``: which trackers a job reports to, and the clear error when one's
library is not installed."""

from __future__ import annotations

import pytest

from tinker_core.config import TRACKERS, JobConfig, LoggingConfig, check_trackers, parse_config
from tinker_core.errors import ConfigError

SFT = {"algorithm": {"name": "sft", "steps": 1}}


def test_the_default_is_tensorboard_as_before_and_tensorboard_false_turns_it_off():
    assert LoggingConfig().trackers() == ["tensorboard"]
    assert LoggingConfig(tensorboard=False).trackers() == []


def test_report_to_lists_the_trackers_each_once():
    logging = LoggingConfig(report_to=["wandb", "mlflow", "wandb"])
    assert logging.trackers() == ["wandb", "mlflow"]
    assert logging.tensorboard is False  # follows report_to, so the dumped config reads the same
    assert LoggingConfig(report_to=[]).trackers() == []


def test_a_dumped_config_with_report_to_parses_to_the_same_trackers():
    job = parse_config({**SFT, "logging": {"report_to": ["tensorboard", "trackio"]}}, check_plugins=False)
    again = JobConfig.model_validate_json(job.model_dump_json())
    assert again.logging.trackers() == ["tensorboard", "trackio"]


def test_tensorboard_false_contradicting_report_to_is_an_error_naming_both():
    with pytest.raises(ConfigError) as e:
        parse_config({**SFT, "logging": {"report_to": ["tensorboard"], "tensorboard": False}}, check_plugins=False)
    assert "tensorboard: false contradicts report_to" in str(e.value)


def test_an_unknown_tracker_lists_the_known_ones():
    with pytest.raises(ConfigError) as e:
        parse_config({**SFT, "logging": {"report_to": ["neptune"]}}, check_plugins=False)
    assert "logging.report_to[0]" in str(e.value) and "'wandb'" in str(e.value)


def test_a_listed_tracker_that_is_not_installed_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(TRACKERS, "wandb", ("no_such_module_for_wandb", "tinker-algos[wandb]"))
    data = {**SFT, "logging": {"report_to": ["wandb"]}}
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    # (in tinker-core's own test env no plugin registers the default optimizer: that is another problem)
    assert [p for p in e.value.problems if p.startswith("logging.")] == [
        "logging.report_to: wandb needs the no_such_module_for_wandb package; pip install 'tinker-algos[wandb]' (or drop wandb)"
    ]
    # check_plugins=False (a client submitting to a remote scheduler) does not look
    assert parse_config(data, check_plugins=False).logging.trackers() == ["wandb"]


def test_the_default_tensorboard_is_not_required(monkeypatch):
    monkeypatch.setitem(TRACKERS, "tensorboard", ("no_such_module_for_tb", "tinker-algos[tensorboard]"))
    assert check_trackers(parse_config(SFT, check_plugins=False)) == []  # skipped with a warning at run time
    assert check_trackers(parse_config({**SFT, "logging": {"report_to": ["tensorboard"]}}, check_plugins=False))
