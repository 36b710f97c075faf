"""OpenTinker's umbrella distribution: ``pip install "opentinker[train]"`` installs the platform.

It holds the release version and the Python API at the front door (:mod:`opentinker.api`)::

    import opentinker

    result = opentinker.train("job.yaml", run_dir="runs/try", seed=1)
    metrics = opentinker.evaluate("runs/try")
    model, tokenizer = opentinker.load_policy("runs/try")

Importing ``opentinker`` is cheap (no torch): the engine loads when a function runs. The code
lives in the packages the extras install: ``tinker_core`` (protocols, plugin hooks, job config),
``tinker_client`` (the ``opentinker`` command), ``tinker_algos`` (training), ``tinker_scheduler``
and ``tinker_serve``.
"""

from opentinker.api import MissingExtraError, evaluate, fork, job_config, load_policy, train

__version__ = "0.1.0"

__all__ = ["MissingExtraError", "__version__", "evaluate", "fork", "job_config", "load_policy", "train"]
