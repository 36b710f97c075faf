"""Which code a job may import (tinker_core.import_policy): the operator's patterns, the refusal
naming the config field and the setting, the kwargs an env's spec declares, and the policy a
scheduler's worker enforces on its process."""

from __future__ import annotations

import os
import re
import threading
import types

import pytest

import tinker_core.registry
from tinker_core import EnvSpec, check_import, hookimpl, import_folders
from tinker_core.config import parse_config
from tinker_core.import_policy import (
    ImportPolicy,
    ImportRefused,
    active_patterns,
    enforced,
    import_refs,
    refused_import,
)

PROGRAM = EnvSpec(id="mine/program-v0", agent_program=True, import_kwargs=("entry", "tasks", "reward"))


@pytest.fixture
def program_env():
    """An env whose spec declares the kwargs that name code, as agent/program-v0's does."""
    mod = types.ModuleType("mine")
    mod.opentinker_register_envs = hookimpl(lambda register: register(PROGRAM, object))
    tinker_core.registry.register_plugin(mod, distribution="mine-dist")


def job(env: dict, **more: object):
    # check_plugins=False: tinker-core's tests run without tinker-algos (no optimizer named adamw)
    return parse_config({"algorithm": {"name": "grpo", "steps": 1}, "env": env, **more}, check_plugins=False)


def test_patterns_allow_an_object_a_module_or_a_package():
    policy = ImportPolicy(("my_pkg.agents:*", "calc:run", "tree.*"))
    allowed = ["my_pkg.agents:run", "my_pkg.agents", "calc:run", "tree", "tree.a.b:f", "tree.a"]
    refused = ["my_pkg.agents.sub:run", "my_pkg:run", "calc:other", "calc", "treehouse:x", "pty:spawn", "os:system",
               "subprocess:call", "", "a:b:c", ".rel:x", "mod:", ":attr", "os:system; rm", None, 3]
    assert [r for r in allowed if not policy.allows(r)] == []
    assert [r for r in refused if policy.allows(r)] == []
    assert not ImportPolicy().allows("calculator_agent:run")  # no patterns: none
    assert ImportPolicy(("*",)).allows("pty:spawn") and ImportPolicy(("*",)).allows_all


@pytest.mark.parametrize("pattern", ["", "my pkg:run", "pkg:*:x", "pkg.**", "*.x", "pkg:a.b", "../x", "pkg:"])
def test_a_malformed_pattern_is_a_value_error_naming_it(pattern):
    with pytest.raises(ValueError, match=re.escape(f"allowed_imports: {pattern!r} is not a pattern; use 'pkg.module:name'")):
        ImportPolicy((pattern,))


def test_the_refusal_is_one_line_naming_the_field_and_the_setting():
    with pytest.raises(ImportRefused) as info:
        ImportPolicy(("my_pkg.*",)).check("pty:spawn", "env.kwargs.entry")
    (message,) = info.value.problems
    assert message.startswith("env.kwargs.entry: 'pty:spawn' is not code this scheduler lets jobs import")
    assert "--allow-import (SchedulerConfig.allowed_imports), now: 'my_pkg.*'" in message and "\n" not in message


def test_a_config_names_code_only_in_the_kwargs_its_env_declares(program_env):
    config = parse_config({
        "env": {"id": "mine/program-v0", "kwargs": {"entry": "pty:spawn", "tasks": [["sh", "-c", "id"]], "words": "os:x"},
                "eval_kwargs": {"reward": "subprocess:call", "path": "/tmp"}},
        "stages": [{"algorithm": {"name": "grpo", "steps": 1}},
                   {"algorithm": {"name": "grpo", "steps": 1}, "env": {"id": "mine/program-v0", "kwargs": {"tasks": "os:listdir"}}},
                   {"algorithm": {"name": "grpo", "steps": 1}, "env": {"id": "mine/program-v0", "address": "h:1",
                                                                          "kwargs": {"entry": "pty:spawn"}}},
                   {"algorithm": {"name": "grpo", "steps": 1}, "env": {"id": "echo/echo-v0", "kwargs": {"entry": "pty:spawn"}}}],
    }, check_plugins=False)
    refs = [(r.field, r.value, r.folder) for r in import_refs(config)]
    # a list of tasks is data; an env served from an address runs elsewhere; echo declares nothing
    assert refs == [("env.kwargs.entry", "pty:spawn", False), ("env.eval_kwargs.reward", "subprocess:call", False),
                    ("env.eval_kwargs.path", "/tmp", True), ("stages[1].env.kwargs.tasks", "os:listdir", False)]


def test_refused_import_names_the_first_refused_field(program_env):
    config = job({"id": "mine/program-v0", "kwargs": {"entry": "my_agents.calc:run", "tasks": "my_agents.calc:TASKS",
                                                      "reward": "os:system"}})
    assert refused_import(config, ImportPolicy(("my_agents.*",))).startswith("env.kwargs.reward: 'os:system' is not code")
    assert refused_import(config, ImportPolicy(("my_agents.*", "os:system"))) is None
    assert refused_import(config, ImportPolicy(("*",))) is None
    # a folder put on sys.path: refused unless the operator allows every import
    config = job({"id": "mine/program-v0", "kwargs": {"entry": "my_agents.calc:run", "tasks": [1], "path": "/srv/x"}})
    message = refused_import(config, ImportPolicy(("my_agents.*",)))
    assert message.startswith("env.kwargs.path: '/srv/x': on a scheduler an env's code is imported from the installed "
                              "packages only") and "--allow-import" in message
    assert refused_import(config, ImportPolicy(("*",))) is None
    assert refused_import(job({"id": "echo/echo-v0", "kwargs": {"path": "/srv/x"}}), ImportPolicy()) is None


def test_nothing_is_enforced_outside_a_schedulers_job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert active_patterns() == []
    check_import("pty:spawn", "env.kwargs.entry")  # an embedded run imports what its user names
    assert import_folders("agents") == ["agents", os.getcwd()]


def test_an_enforced_policy_refuses_imports_and_folders_until_it_ends():
    with enforced(ImportPolicy(("calc:*",))):
        check_import("calc:run", "env.kwargs.entry")
        with pytest.raises(ImportRefused, match=r"^env.kwargs.entry: 'pty:spawn' is not code"):
            check_import("pty:spawn", "env.kwargs.entry")
        assert import_folders(None) == []  # not even the working directory
        with pytest.raises(ImportRefused, match=r"^env.kwargs.path: 'mine': on a scheduler"):
            import_folders("mine")
        with enforced(ImportPolicy(("*",))):  # policies stack: a ref must pass every one
            assert active_patterns() == [("calc:*",), ("*",)]
            with pytest.raises(ImportRefused):
                check_import("os:system", "env.kwargs.reward")
    check_import("pty:spawn", "env.kwargs.entry")
    assert active_patterns() == []


def test_the_policy_is_process_wide_so_episode_threads_see_it():
    seen: list[BaseException | None] = []

    def episode() -> None:
        try:
            check_import("pty:spawn", "env.kwargs.entry")
            seen.append(None)
        except ImportRefused as e:
            seen.append(e)

    with enforced(ImportPolicy()):
        t = threading.Thread(target=episode)
        t.start()
        t.join()
    assert isinstance(seen[0], ImportRefused)


def test_the_spec_declares_its_import_kwargs_and_round_trips():
    assert EnvSpec.from_json(PROGRAM.to_json()) == PROGRAM and PROGRAM.to_dict()["import_kwargs"] == ["entry", "tasks", "reward"]
    plain = EnvSpec(id="mine/plain-v0")
    assert "import_kwargs" not in plain.to_dict() and EnvSpec.from_dict(plain.to_dict()).import_kwargs == ()
