"""{{ cookiecutter.project_name }}: {{ cookiecutter.description }}

The optimizer is in :mod:`{{ cookiecutter.__module }}.optimizer`; :mod:`{{ cookiecutter.__module }}.plugin`
registers it with OpenTinker. This module imports nothing, so discovering the plugin stays cheap.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("{{ cookiecutter.project_name }}")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
