"""Naming rules: a plugin's short name, and a Hugging Face hub id.

A plugin's short name is the one a plugin author picks (``word-count``). It names the distribution (``tinker-env-word-count``), the module (``tinker_env_word_count``),
the env ids' namespace (``word-count/main-v0``) and the registered estimator, loss or optimizer
(``word_count``). ``opentinker new`` and the templates' checks both use it.
"""

from __future__ import annotations

import re

PLUGIN_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
"""Lower-case letters and digits, words joined by ``-``, starting with a letter."""

PLUGIN_NAME_RULE = "use lower-case letters and digits, words joined by '-', starting with a letter"
"""What :data:`PLUGIN_NAME_RE` asks for, as an error message says it."""


def is_plugin_name(name: str) -> bool:
    """Whether ``name`` follows :data:`PLUGIN_NAME_RE`."""
    return PLUGIN_NAME_RE.fullmatch(name) is not None


HUB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")
"""A Hugging Face hub id: ``name`` or ``org/name``, each part starting with a letter or digit, at
most 96 characters (the one rule of ``opentinker export``'s portable names and the scheduler's
allowed base models)."""


def is_hub_id(name: str) -> bool:
    """Whether ``name`` has the shape of a hub id (:data:`HUB_ID_RE`, and no ``..``); a name that
    is also a path on this machine is for the caller to tell apart."""
    return HUB_ID_RE.fullmatch(name) is not None and ".." not in name
