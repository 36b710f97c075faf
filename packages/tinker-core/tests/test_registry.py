"""Plugin discovery and registries, through the real entry point of tinker-env-echo."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import tinker_core
import tinker_core.registry
from tinker_core import DuplicateNameError, EnvSpec, PluginError, UnknownNameError, hookimpl
from tinker_core.contracts import AdvantageOutputs
from tinker_core.registry import plugin_system


def plugin_module(name: str, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(mod, hook_name, hookimpl(fn))
    return mod


def test_discovery_is_lazy_and_finds_the_echo_plugin_through_its_entry_point():
    system = plugin_system()
    assert not system._loaded  # creating the system discovers nothing
    envs = tinker_core.registry.get_registry("envs")
    assert {"echo/echo-v0", "echo/countdown-v0", "echo/call-response-v0"} <= set(envs.names())
    entry = envs.get("echo/echo-v0")
    assert entry.distribution == "tinker-env-echo" and entry.version == "0.1.0"
    assert entry.spec.id == "echo/echo-v0"
    echo = [p for p in tinker_core.registry.list_plugins() if p.distribution == "tinker-env-echo"]
    assert echo and echo[0].to_dict()["registers"]["envs"] == sorted(
        ["echo/echo-v0", "echo/countdown-v0", "echo/call-response-v0"]
    )


def test_importing_tinker_core_loads_no_plugin_and_no_torch():
    code = (
        "import sys, tinker_core, tinker_core.registry\n"
        "from tinker_core import EnvSpec, AdvantageInputs, hookimpl\n"
        "from tinker_core.fsm import TurnFSM\n"
        "from tinker_core.contracts import Batch\n"
        "from tinker_core.config import JobConfig\n"
        "assert 'torch' not in sys.modules\n"
        "assert not any(m.startswith('tinker_env_echo') for m in sys.modules)\n"
        "tinker_core.registry.get_registry('envs')\n"
        "assert 'tinker_env_echo.plugin' in sys.modules and 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_make_env_builds_a_fresh_registered_env_with_kwargs():
    env = tinker_core.make_env("echo/echo-v0", words=("only",))
    obs, _ = env.reset(seed=0)
    assert obs == "Say: only\n"
    assert env.step("only")[1] == 1.0
    assert tinker_core.make_env("echo/echo-v0") is not env
    assert tinker_core.registry.env_spec("echo/countdown-v0").max_turns == 10


def test_env_factory_looks_the_env_up_once_and_builds_what_make_env_builds(monkeypatch):
    build = tinker_core.env_factory("echo/echo-v0", words=("only",))
    lookups = []
    real = tinker_core.registry.get_registry
    monkeypatch.setattr(tinker_core.registry, "get_registry", lambda kind: lookups.append(kind) or real(kind))
    a, b = build(), build()
    assert lookups == []  # building envs looks nothing up: the entry was found when the factory was made
    assert a is not b and a.env_spec is b.env_spec
    monkeypatch.undo()
    assert a.env_spec is tinker_core.registry.env_spec("echo/echo-v0")
    assert a.reset(seed=0)[0] == tinker_core.make_env("echo/echo-v0", words=("only",)).reset(seed=0)[0] == "Say: only\n"
    with pytest.raises(UnknownNameError, match="did you mean 'echo/echo-v0'"):
        tinker_core.env_factory("echo/ecoh-v0")  # an unknown id fails when the factory is made


def test_env_factory_calls_a_class_carrying_its_spec_directly_and_attaches_it_otherwise(monkeypatch):
    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
    carried, bare = EnvSpec(id="mine/carried-v0"), EnvSpec(id="mine/bare-v0")

    class Carries:
        env_spec = carried

        def __init__(self, size: int = 1) -> None:
            self.size = size

    class Bare:
        def __init__(self, size: int = 1) -> None:
            self.size = size

    def register_both(register):
        register(carried, Carries)
        register(bare, Bare)

    tinker_core.registry.register_plugin(plugin_module("mine", opentinker_register_envs=register_both), distribution="my-dist")
    direct = tinker_core.env_factory("mine/carried-v0", size=3)
    assert direct.func is Carries  # decided once: build_env would attach nothing
    assert direct().size == 3 and direct().env_spec is carried
    attached = tinker_core.env_factory("mine/bare-v0", size=2)
    assert attached.func is tinker_core.registry.build_env
    env = attached()
    assert env.size == 2 and env.env_spec is bare  # the registered spec, attached per env


def test_unknown_names_get_did_you_mean():
    with pytest.raises(UnknownNameError, match=r"unknown env 'echo/ecoh-v0'; did you mean 'echo/echo-v0'\?"):
        tinker_core.make_env("echo/ecoh-v0")
    with pytest.raises(UnknownNameError, match="did you mean 'echo/countdown-v0'"):
        tinker_core.make_env("echo/countdwn-v0")
    with pytest.raises(KeyError):  # UnknownNameError is also a KeyError
        tinker_core.registry.get_registry("envs").get("zzz/nothing-v0")


def test_allowlist_limits_loading_to_named_distributions(monkeypatch):
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker_env_echo")  # any PEP 503 spelling
    assert [p.distribution for p in tinker_core.registry.list_plugins()] == ["tinker-env-echo"]


def test_allowlist_naming_a_missing_distribution_is_an_error(monkeypatch):
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-env-echo,tinker-env-nope")
    with pytest.raises(PluginError, match="OPENTINKER_LOAD_PLUGINS names tinker-env-nope"):
        tinker_core.registry.get_registry("envs")


def test_disable_autoload_loads_no_entry_point(monkeypatch):
    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
    tinker_core.registry.register_plugin(
        plugin_module("mine", opentinker_register_envs=lambda register: register(EnvSpec(id="mine/a-v0"), object)),
        distribution="my-dist",
    )
    assert tinker_core.registry.get_registry("envs").names() == ["mine/a-v0"]
    assert tinker_core.registry.get_registry("envs").get("mine/a-v0").distribution == "my-dist"


def test_duplicate_names_are_refused_naming_both_distributions():
    def register_again(register):
        register(EnvSpec(id="echo/echo-v0"), object)

    tinker_core.registry.register_plugin(plugin_module("dup", opentinker_register_envs=register_again), distribution="copycat")
    with pytest.raises(DuplicateNameError, match="'tinker-env-echo' and by distribution 'copycat'"):
        tinker_core.registry.get_registry("envs")


def test_check_pending_rejects_a_misspelled_hook():
    tinker_core.registry.register_plugin(
        plugin_module("typo", opentinker_register_env=lambda register: None), distribution="typo-dist"
    )
    with pytest.raises(PluginError, match="typo-dist.*does not exist"):
        tinker_core.registry.get_registry("envs")


def test_a_hook_that_raises_is_reported_with_its_distribution():
    def broken(register):
        raise RuntimeError("boom")

    tinker_core.registry.register_plugin(plugin_module("b", opentinker_register_losses=broken), distribution="broken-dist")
    with pytest.raises(PluginError, match="opentinker_register_losses of distribution 'broken-dist' failed: RuntimeError: boom"):
        tinker_core.registry.get_registry("losses")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda register: register("x/y-v0", object), "needs an EnvSpec"),
        (lambda register: register(EnvSpec(id="x/y-v0"), 42), "not callable"),
    ],
)
def test_invalid_env_registrations_are_clear(call, match):
    tinker_core.registry.register_plugin(plugin_module("bad", opentinker_register_envs=call), distribution="bad-dist")
    with pytest.raises(PluginError, match=match):
        tinker_core.registry.get_registry("envs")


def test_hook_opentinker_register_envs():
    tinker_core.registry.register_plugin(
        plugin_module("e", opentinker_register_envs=lambda register: register(EnvSpec(id="loc/e-v0", description="An env."), dict)),
        distribution="e-dist",
    )
    entry = tinker_core.registry.get_registry("envs").get("loc/e-v0")
    assert entry.obj is dict and entry.description == "An env." and entry.kind == "envs"


def test_hook_opentinker_register_advantage_estimators():
    def zero(inputs, **config):
        """Zero advantages."""
        return AdvantageOutputs(inputs.mask_B_T * 0, inputs.mask_B_T * 0)

    tinker_core.registry.register_plugin(
        plugin_module("a", opentinker_register_advantage_estimators=lambda register: register("zero", zero, needs_critic=True)),
        distribution="a-dist",
    )
    entry = tinker_core.registry.get_advantage_estimator("zero")
    assert entry.obj is zero and entry.needs_critic is True and entry.description == "Zero advantages."
    with pytest.raises(UnknownNameError, match="did you mean 'zero'"):
        tinker_core.registry.get_advantage_estimator("zer0")


def test_hook_opentinker_register_losses():
    def my_loss(inputs, **config):
        return None

    tinker_core.registry.register_plugin(
        plugin_module("l", opentinker_register_losses=lambda register: register("my_loss", my_loss, kind="value")),
        distribution="l-dist",
    )
    loss = tinker_core.registry.get_loss("my_loss")
    assert (loss.loss_kind, loss.vanishes_at_zero_advantage) == ("value", False)


def test_entry_options_is_the_deprecated_dict_of_the_typed_attributes():
    tinker_core.registry.register_plugin(
        plugin_module("o", opentinker_register_losses=lambda register: register("old_style", lambda inputs: None, kind="kl")),
        distribution="o-dist",
    )
    entry = tinker_core.registry.get_loss("old_style")
    with pytest.warns(DeprecationWarning, match="loss_kind"):
        assert entry.options == {"kind": "kl", "vanishes_at_zero_advantage": False}
    with pytest.warns(DeprecationWarning):
        assert tinker_core.registry.get_registry("envs").get("echo/echo-v0").options["spec"].id == "echo/echo-v0"


def test_hook_opentinker_register_doctor_checks():
    from tinker_core.doctor import Finding

    def check_sim():
        """Whether the simulator is installed."""
        return [Finding("sim", "missing", "error", fix="apt-get install sim")]

    tinker_core.registry.register_plugin(
        plugin_module("d", opentinker_register_doctor_checks=lambda register: register("sim", check_sim)),
        distribution="d-dist",
    )
    entry = tinker_core.registry.get_registry("doctor_checks").get("sim")
    assert entry.obj is check_sim and entry.distribution == "d-dist" and entry.description.startswith("Whether")
    (finding,) = entry.obj()
    assert finding.line() == "error: sim: missing; fix: apt-get install sim"
    with pytest.raises(ValueError, match="must name its fix"):
        Finding("sim", "missing", "error")


def test_hook_opentinker_register_rollout_proxies():
    def start(policy, renderer, params, *, adapter=None, max_context_tokens=None):
        """A proxy that serves nothing."""

    tinker_core.registry.register_plugin(
        plugin_module("p", opentinker_register_rollout_proxies=lambda register: register("mine", start)),
        distribution="p-dist",
    )
    entry = tinker_core.registry.get_rollout_proxy("mine")
    assert entry.obj is start and entry.description == "A proxy that serves nothing." and entry.kind == "rollout_proxies"
    with pytest.raises(UnknownNameError, match="did you mean 'mine'"):
        tinker_core.registry.get_rollout_proxy("mien")


def test_hook_opentinker_register_rollout_engines():
    def start(context):
        """An engine that samples nothing."""

    tinker_core.registry.register_plugin(
        plugin_module("r", opentinker_register_rollout_engines=lambda register: register("mine", start)),
        distribution="r-dist",
    )
    entry = tinker_core.registry.get_rollout_engine("mine")
    assert entry.obj is start and entry.description == "An engine that samples nothing." and entry.kind == "rollout_engines"
    with pytest.raises(UnknownNameError, match="did you mean 'mine'"):
        tinker_core.registry.get_rollout_engine("mien")


def test_hook_opentinker_register_http_fronts():
    def front(models, **limits):
        """An app that answers nothing."""

    tinker_core.registry.register_plugin(
        plugin_module("h", opentinker_register_http_fronts=lambda register: register("mine", front)),
        distribution="h-dist",
    )
    entry = tinker_core.registry.get_http_front("mine")
    assert entry.obj is front and entry.description == "An app that answers nothing." and entry.kind == "http_fronts"
    assert entry.distribution == "h-dist"
    with pytest.raises(UnknownNameError, match="did you mean 'mine'"):
        tinker_core.registry.get_http_front("mien")


def test_hook_opentinker_register_job_clients():
    class Client:
        """A job client that reaches nothing."""

        def __init__(self, address, api_key, *, tls_ca=None):
            self.address = address

    tinker_core.registry.register_plugin(
        plugin_module("j", opentinker_register_job_clients=lambda register: register("mine", Client)),
        distribution="j-dist",
    )
    entry = tinker_core.registry.get_job_client("mine")
    assert entry.obj is Client and entry.kind == "job_clients"
    assert entry.obj("host:1", None).address == "host:1"
    tinker_core.registry.reset_plugins()
    tinker_core.registry.register_plugin(
        plugin_module("j", opentinker_register_job_clients=lambda register: register("Bad Name", Client)),
        distribution="j-dist",
    )
    with pytest.raises(PluginError, match="registered job client name 'Bad Name'"):
        tinker_core.registry.get_job_client("mine")


def test_a_loss_declares_at_registration_whether_it_vanishes_at_zero_advantage():
    def pg(inputs, **config):
        return None

    def register(register):
        register("pg_zero", pg, vanishes_at_zero_advantage=True)
        register("pg_plain", pg)

    tinker_core.registry.register_plugin(plugin_module("l", opentinker_register_losses=register), distribution="l-dist")
    zero = tinker_core.registry.get_loss("pg_zero")
    assert (zero.loss_kind, zero.vanishes_at_zero_advantage) == ("policy", True)
    assert tinker_core.registry.get_loss("pg_plain").vanishes_at_zero_advantage is False
    tinker_core.registry.reset_plugins()
    tinker_core.registry.register_plugin(
        plugin_module("l", opentinker_register_losses=lambda register: register("v", pg, kind="value", vanishes_at_zero_advantage=True)),
        distribution="l-dist",
    )
    with pytest.raises(PluginError, match="loss 'v' of kind 'value' declares vanishes_at_zero_advantage=True"):
        tinker_core.registry.get_registry("losses")


def test_loss_kind_and_names_are_checked():
    tinker_core.registry.register_plugin(
        plugin_module("l", opentinker_register_losses=lambda register: register("Bad Name", print)),
        distribution="l-dist",
    )
    with pytest.raises(PluginError, match="registered loss name 'Bad Name'"):
        tinker_core.registry.get_registry("losses")
    tinker_core.registry.reset_plugins()
    tinker_core.registry.register_plugin(
        plugin_module("l", opentinker_register_losses=lambda register: register("ok", print, kind="magic")),
        distribution="l-dist",
    )
    with pytest.raises(PluginError, match="kind 'magic'; kinds are policy"):
        tinker_core.registry.get_registry("losses")


def test_hook_opentinker_register_optimizers():
    tinker_core.registry.register_plugin(
        plugin_module("o", opentinker_register_optimizers=lambda register: register("my_opt", dict, description="d")),
        distribution="o-dist",
    )
    entry = tinker_core.registry.get_optimizer("my_opt")
    assert entry.obj is dict and entry.distribution == "o-dist" and entry.description == "d"


def test_hook_opentinker_register_commands(monkeypatch):
    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")  # only the plugin below
    seen = []
    tinker_core.registry.register_plugin(plugin_module("c", opentinker_register_commands=lambda cli: seen.append(cli)))
    system = plugin_system()
    system.ensure_loaded()
    system.pm.hook.opentinker_register_commands(cli="the-cli")
    assert seen == ["the-cli"]


def test_registry_kind_is_checked():
    with pytest.raises(ValueError, match="unknown registry kind 'env'"):
        tinker_core.registry.get_registry("env")


def test_debug_switch_prints_each_hook_call(monkeypatch, capsys):
    monkeypatch.setenv("OPENTINKER_DEBUG_PLUGINS", "1")
    tinker_core.registry.reset_plugins()
    tinker_core.registry.get_registry("envs")
    assert "calling opentinker_register_envs of tinker-env-echo" in capsys.readouterr().err
