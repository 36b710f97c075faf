"""The rule for a plugin's short name, the one a plugin author picks (``word-count``).

It names the distribution (``tinker-env-word-count``), the module (``tinker_env_word_count``),
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
