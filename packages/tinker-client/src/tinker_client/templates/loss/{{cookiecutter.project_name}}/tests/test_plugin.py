"""``{{ cookiecutter.__registered_name }}`` passes the conformance kit and is registered through the entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tinker_core import get_loss
from tinker_core import check_loss

from {{ cookiecutter.__module }}.loss import loss
from {{ cookiecutter.__module }}.plugin import KIND, NAME
{% if cookiecutter.loss_kind == "policy" %}
CONFIGS = [{}, {"cap": 1.05}]
{%- else %}
CONFIGS = [{}, {"gamma": 0.0}, {"gamma": 0.5}]
{%- endif %}


@pytest.mark.parametrize("config", CONFIGS)
def test_the_loss_passes_the_conformance_kit(config):
    check_loss(loss, kind=KIND, config=config)


def test_the_installed_plugin_registers_the_loss():
    # Goes through the entry point in pyproject.toml: fails until `pip install -e .`
    entry = get_loss(NAME)
    assert entry.distribution == "{{ cookiecutter.project_name }}"
    assert entry.loss_kind == "{{ cookiecutter.loss_kind }}"
    check_loss(NAME)


def test_listing_the_plugin_does_not_import_torch():
    code = "import sys, {{ cookiecutter.__module }}.plugin; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
