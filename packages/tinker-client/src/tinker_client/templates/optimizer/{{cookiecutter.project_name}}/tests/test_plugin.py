"""``{{ cookiecutter.__registered_name }}`` passes the conformance kit and is registered through the entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tinker_core import get_optimizer
from tinker_core import check_optimizer

from {{ cookiecutter.__module }}.optimizer import build
from {{ cookiecutter.__module }}.plugin import NAME
{% if cookiecutter.implementation == "from-scratch" %}
CONFIGS = [{}, {"momentum": 0.0}, {"weight_decay": 0.1}]
{%- else %}
CONFIGS = [{}, {"weight_decay": 0.1, "betas": [0.9, 0.95]}]
{%- endif %}


@pytest.mark.parametrize("config", CONFIGS)
def test_the_optimizer_passes_the_conformance_kit(config):
    check_optimizer(build, config=config)


def test_the_installed_plugin_registers_the_optimizer():
    # Goes through the entry point in pyproject.toml: fails until `pip install -e .`
    assert get_optimizer(NAME).distribution == "{{ cookiecutter.project_name }}"
    check_optimizer(NAME)


def test_listing_the_plugin_does_not_import_torch():
    code = "import sys, {{ cookiecutter.__module }}.plugin; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
