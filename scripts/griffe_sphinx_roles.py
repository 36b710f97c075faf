"""A griffe extension for the API reference (mkdocs.yml): our docstrings use Sphinx roles
(``:func:`train```, ``:class:`~tinker_core.env.EnvSpec```) and ``Example::`` blocks; Markdown
shows them as plain code (``train``, ``EnvSpec``) and ``Example:``."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const|type):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """``:func:`a.b``` -> ```a.b```; ``:class:`~a.B``` -> ```B```; ``Example::`` -> ``Example:``."""
    text = ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)
    text = re.sub(r"(?m)(\S)::$", r"\1:", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
