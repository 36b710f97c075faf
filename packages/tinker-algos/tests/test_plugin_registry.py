"""The built-ins are registered through the public hooks and entry point, like any plugin."""

from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys

import pytest

import tinker_core
import tinker_core.registry
from tinker_algos import plugin
from tinker_core.hookspecs import hookimpl

ESTIMATORS = {
    "gae": True,
    "grpo": False,
    "dr_grpo": False,
    "rloo": False,
    "reinforce_pp": False,
    "reinforce_pp_baseline": False,
}
LOSSES = {
    "cross_entropy": "supervised",
    "importance_sampling": "policy",
    "ppo": "policy",
    "cispo": "policy",
    "dro": "policy",
    "gspo": "policy",
    "stable_reinforce": "policy",
    "dpo": "preference",
    "cdpo": "preference",
    "ipo": "preference",
    "value": "value",
    "k1": "kl",
    "k2": "kl",
    "k3": "kl",
}
OPTIMIZERS = ["adamw", "lion", "sgd"]


pytestmark = pytest.mark.usefixtures("fresh_tinker_algos_plugins")


def test_every_builtin_is_registered_by_the_tinker_algos_distribution():
    for name, needs_critic in ESTIMATORS.items():
        entry = tinker_core.registry.get_advantage_estimator(name)
        assert entry.distribution == "tinker-algos"
        assert entry.needs_critic is needs_critic
        assert entry.description
    for name, kind in LOSSES.items():
        entry = tinker_core.registry.get_loss(name)
        assert (entry.distribution, entry.loss_kind) == ("tinker-algos", kind)
        assert entry.description
    for name in OPTIMIZERS:
        assert tinker_core.registry.get_optimizer(name).distribution == "tinker-algos"
    (info,) = [p for p in tinker_core.registry.list_plugins() if p.distribution == "tinker-algos"]
    assert tinker_core.registry.get_registry("envs").get("agent/program-v0").distribution == "tinker-algos"
    assert info.to_dict()["registers"] == {
        "envs": ["agent/program-v0"],  # agent programs trained through the rollout proxy (tinker_algos.rollout.agent_program)
        "advantage_estimators": sorted(ESTIMATORS),
        "losses": sorted(LOSSES),
        "optimizers": OPTIMIZERS,
        "doctor_checks": ["model-cache", "torch"],  # opentinker doctor's checks of what training needs
        "rollout_engines": ["hf"],  # the in-process sampler (tinker_algos.sampling.engine)
    }


def test_plugin_tables_match_the_implementations():
    from tinker_algos.builtins.estimators import ESTIMATORS as IMPL_ESTIMATORS
    from tinker_algos.builtins.losses import LOSSES as IMPL_LOSSES
    from tinker_algos.builtins.optimizers import OPTIMIZERS as IMPL_OPTIMIZERS

    assert {n: c for n, (_, c) in IMPL_ESTIMATORS.items()} == ESTIMATORS
    assert (
        {n: k for n, (_, k) in IMPL_LOSSES.items()}
        == LOSSES
        == {n: k for n, (k, _) in plugin.LOSS_TABLE.items()}
    )
    assert sorted(IMPL_OPTIMIZERS) == OPTIMIZERS == sorted(plugin.OPTIMIZER_DESCRIPTIONS)


def test_deferred_callables_resolve_expose_signatures_and_pickle():
    from tinker_algos.builtins import losses, optimizers

    ppo = tinker_core.registry.get_loss("ppo").obj
    assert ppo.resolve() is losses.ppo
    params = inspect.signature(ppo).parameters
    assert list(params)[1:] == ["eps_low", "eps_high", "dual_clip"]
    assert pickle.loads(pickle.dumps(ppo)).resolve() is losses.ppo
    lion = tinker_core.registry.get_optimizer("lion").obj
    assert lion.resolve() is optimizers.lion and "lion" in repr(lion)
    assert "lr" in inspect.signature(lion).parameters


def test_discovery_and_lookup_do_not_import_torch():
    code = (
        "import sys, tinker_core.registry\n"
        "import tinker_algos.plugin\n"
        "for kind in ('advantage_estimators', 'losses', 'optimizers'):\n"
        "    tinker_core.registry.get_registry(kind).names()\n"
        "tinker_core.registry.get_loss('ppo'); tinker_core.registry.get_optimizer('lion')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "tinker_core.registry.get_loss('ppo').obj  # still lazy until called\n"
        "assert 'torch' not in sys.modules\n"
    )
    env = dict(os.environ, OPENTINKER_LOAD_PLUGINS="tinker-algos")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


class ThirdPartyGRPO:
    """A local plugin that claims a built-in name."""

    @staticmethod
    @hookimpl
    def opentinker_register_advantage_estimators(register):
        register("grpo", lambda inputs, **config: None)


def test_a_third_party_plugin_cannot_shadow_a_builtin():
    tinker_core.registry.register_plugin(ThirdPartyGRPO(), distribution="my-estimators")
    with pytest.raises(tinker_core.DuplicateNameError, match="'tinker-algos'.*'my-estimators'"):
        tinker_core.registry.get_advantage_estimator("grpo")


def test_unknown_names_get_a_suggestion():
    with pytest.raises(tinker_core.UnknownNameError, match="grpo"):
        tinker_core.registry.get_advantage_estimator("gpro")


# ---- the conformance kit over every built-in ------------------------------------------------

CONFORMANCE_CASES = (
    [("advantage_estimators", name, {}) for name in ESTIMATORS]
    + [
        ("advantage_estimators", "gae", {"whiten": False, "gamma": 0.9, "lam": 0.8}),
        ("advantage_estimators", "reinforce_pp", {"gamma": 0.9, "whiten": False}),
    ]
    + [("losses", name, {}) for name in LOSSES]
    + [
        ("losses", "ppo", {"dual_clip": None, "eps_high": 0.28}),
        ("losses", "value", {"clip_eps": None}),
        ("losses", "dpo", {"label_smoothing": 0.2, "beta": 0.5}),
    ]
    + [("optimizers", name, {}) for name in OPTIMIZERS]
    + [
        ("optimizers", "sgd", {"momentum": 0.9, "nesterov": True}),
        ("optimizers", "adamw", {"amsgrad": True}),
        ("optimizers", "lion", {"betas": (0.95, 0.98)}),
    ]
)


@pytest.mark.parametrize(
    ("kind", "name", "config"),
    CONFORMANCE_CASES,
    ids=[f"{k}-{n}-{'-'.join(map(str, c.values())) or 'default'}" for k, n, c in CONFORMANCE_CASES],
)
def test_builtins_pass_the_conformance_kit(kind, name, config):
    from tinker_core.testing import check_advantage_estimator, check_loss, check_optimizer

    check = {
        "advantage_estimators": check_advantage_estimator,
        "losses": check_loss,
        "optimizers": check_optimizer,
    }[kind]
    check(name, config=config)
