"""OpenTinker's umbrella distribution: ``pip install "opentinker[train]"`` installs the platform.

This module holds only the release version. The code lives in the packages the extras install:
``tinker_core`` (protocols, plugin hooks, job config), ``tinker_client`` (the ``opentinker``
command), ``tinker_algos`` (training), ``tinker_scheduler`` and ``tinker_serve``.
"""

__version__ = "0.1.0"
