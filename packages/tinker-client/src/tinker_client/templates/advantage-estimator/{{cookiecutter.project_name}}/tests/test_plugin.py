"""``{{ cookiecutter.__registered_name }}`` passes the conformance kit and is registered through the entry point."""

from __future__ import annotations

import pytest
from tinker_core import get_advantage_estimator
from tinker_core import check_advantage_estimator

from {{ cookiecutter.__module }}.estimator import NAME, NEEDS_CRITIC, estimate
{% if cookiecutter.needs_critic == "yes" %}
CONFIGS = [{}, {"gamma": 0.9, "whiten": False}]
{%- else %}
CONFIGS = [{}, {"normalize": True}]
{%- endif %}


@pytest.mark.parametrize("config", CONFIGS)
def test_the_estimator_passes_the_conformance_kit(config):
    check_advantage_estimator(estimate, needs_critic=NEEDS_CRITIC, config=config)


def test_the_installed_plugin_registers_the_estimator():
    # Goes through the entry point in pyproject.toml: fails until `pip install -e .`
    entry = get_advantage_estimator(NAME)
    assert entry.distribution == "{{ cookiecutter.project_name }}"
    assert entry.needs_critic is NEEDS_CRITIC
    check_advantage_estimator(NAME)
