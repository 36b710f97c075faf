"""The conformance kit: what every OpenTinker plugin (ours, generated, third-party) is tested with.

Call a check in a test; it returns None or raises :class:`ConformanceError` naming the plugin,
the check that failed and what to fix::

    from tinker_core.testing import check_env, check_advantage_estimator

    def test_my_env():
        check_env("mine/task-v0")            # a registered id, an instance or a factory

    def test_my_estimator():
        check_advantage_estimator(my_estimator, needs_critic=False)

The same functions are pytest fixtures (``opentinker_check_env``, ...) through the pytest
plugin :mod:`tinker_core.testing.pytest_plugin`, registered by installing tinker-core.

==============================  ====================================================  ======
check                           plugin                                                torch
==============================  ====================================================  ======
:func:`check_env`               :class:`~tinker_core.env.TextEnv`                      no
:func:`check_multi_agent_env`   :class:`~tinker_core.env.MultiAgentTextEnv`            no
:func:`check_advantage_estimator`  ``estimator(AdvantageInputs, **config)``            no
:func:`check_loss`              ``loss_fn(LossInputs, **config)``                      yes
:func:`check_optimizer`         ``factory(params, **config) -> Optimizer``             yes
:func:`check_rollout_engine`    :class:`~tinker_core.engines.RolloutEngine`            no
:func:`check_all_registered`    everything in the plugin registries                   some
==============================  ====================================================  ======

What each check requires is documented in its module (:mod:`.envs`, :mod:`.multi_agent_envs`,
:mod:`.estimators`, :mod:`.losses`, :mod:`.optimizers`, :mod:`.engines`). Importing this package never imports
torch: the two torch checks import it when called and raise :class:`TorchNotInstalledError`
(an ImportError too) telling you to install tinker-algos when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.lazy import lazy_package

# Loaded on first use, so that the pytest plugin (a submodule, imported into every pytest run
# where tinker-core is installed) does not pull numpy and gymnasium in.
if TYPE_CHECKING:  # pragma: no cover - read by lazy_package too
    from tinker_core.testing._common import ConformanceError as ConformanceError
    from tinker_core.testing._common import ConformanceWarning as ConformanceWarning
    from tinker_core.testing._common import TorchNotInstalledError as TorchNotInstalledError
    from tinker_core.testing._episodes import CheckOptions as CheckOptions
    from tinker_core.testing.engines import StepHold as StepHold
    from tinker_core.testing.engines import check_rollout_engine as check_rollout_engine
    from tinker_core.testing.envs import DEFAULT_ACTIONS as DEFAULT_ACTIONS
    from tinker_core.testing.envs import check_env as check_env
    from tinker_core.testing.estimators import (
        check_advantage_estimator as check_advantage_estimator,
    )
    from tinker_core.testing.losses import check_loss as check_loss
    from tinker_core.testing.multi_agent_envs import check_multi_agent_env as check_multi_agent_env
    from tinker_core.testing.optimizers import check_optimizer as check_optimizer
    from tinker_core.testing.registered import check_all_registered as check_all_registered
    from tinker_core.testing.registered import registered_checks as registered_checks

__getattr__, __dir__, __all__ = lazy_package(__name__)
