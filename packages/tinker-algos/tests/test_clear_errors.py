"""Clear errors of issue 43 that tinker-algos owns: an agent program's config mistakes are one
problem naming the field (not a traceback); a stage's env that cannot be built is a ConfigError
naming the key before any rollout; a half-written checkpoint a killed run left is tidied at the
next start; compare refuses an output directory whose report files it did not write."""

from __future__ import annotations

from pathlib import Path

import pytest

import tinker_core
from tinker_algos.compare.report import MARKER, check_output
from tinker_algos.compare.spec import CompareError
from tinker_algos.hub.cache import clean_atomic_leftovers
from tinker_algos.rollout.env_probe import check_stage_env
from tinker_core.config import EnvConfig
from tinker_core.errors import ConfigError

AGENTS = {
    "syntax_agent.py": "def run(task, client:\n",
    "raising_agent.py": "raise RuntimeError('OPENAI_API_KEY is not set')\n",
    "fine_agent.py": "def run(task, client):\n    return 1.0\n",
}


@pytest.fixture
def agents(tmp_path: Path) -> Path:
    for name, text in AGENTS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"entry": "syntax_agent:run", "tasks": [1]}, r"env.kwargs.entry: importing 'syntax_agent' .* SyntaxError: '\(' was never closed \(.*syntax_agent.py, line 1\)"),
    ({"entry": "raising_agent:run", "tasks": [1]}, r"env.kwargs.entry: importing 'raising_agent' .* RuntimeError: OPENAI_API_KEY is not set"),
    ({"entry": "fine_agent:run", "tasks": 5}, r"env.kwargs.tasks: 5 gives no list of tasks"),
    ({"entry": "fine_agent:run", "tasks": "fine_agent:run"}, r"env.kwargs.tasks: 'fine_agent:run' gives no list of tasks"),
    ({"entry": "fine_agent:run", "tasks": [1], "timeout_s": "abc"}, r"env.kwargs.timeout_s: must be a number of seconds > 0, got 'abc'"),
    ({"entry": "fine_agent:run", "tasks": [1], "timeuot_s": 5}, r"env.kwargs.timeuot_s: agent/program-v0 takes no argument 'timeuot_s'; did you mean 'timeout_s'\?"),
])
def test_an_agent_config_mistake_is_one_problem_naming_the_field(agents: Path, kwargs: dict, expected: str) -> None:
    """The finding: each of these was a traceback."""
    with pytest.raises(ConfigError) as e:
        tinker_core.make_env("agent/program-v0", path=str(agents), **kwargs)
    [problem] = e.value.problems
    assert "\n" not in problem
    assert __import__("re").search(expected, problem), problem


def test_a_stage_env_that_cannot_be_built_names_the_key(agents: Path) -> None:
    env = EnvConfig(id="agent/program-v0", kwargs={"entry": "fine_agent:run", "tasks": [1], "path": str(agents)},
                    eval_kwargs={"entry": "fine_agent:run", "tasks": [], "path": str(agents)})
    with pytest.raises(ConfigError, match=r"env.kwargs.tasks: no tasks"):  # eval_kwargs are built too
        check_stage_env(env)
    check_stage_env(EnvConfig(id="agent/program-v0", kwargs={"entry": "fine_agent:run", "tasks": [1], "path": str(agents)}))


def test_a_half_written_checkpoint_is_removed_and_a_moved_aside_one_restored(tmp_path: Path) -> None:
    """The finding: a checkpoint temp dir a killed run was writing stayed forever."""
    root = tmp_path / "checkpoints"
    (root / ".step-000004.tmp-0123abcd").mkdir(parents=True)  # killed while writing step 4
    (root / ".step-000004.tmp-0123abcd" / "model.safetensors").write_bytes(b"half")
    (root / ".step-000002.old-89abcdef").mkdir()  # killed between the two renames of step 2
    (root / "step-000003").mkdir()
    (root / ".step-000003.old-00000000").mkdir()  # step 3's new copy is in place: the old one goes
    notes = clean_atomic_leftovers(root)
    assert sorted(p.name for p in root.iterdir()) == ["step-000002", "step-000003"]
    assert len(notes) == 3 and any("restored step-000002" in n for n in notes)
    assert clean_atomic_leftovers(tmp_path / "missing") == []


def test_compare_claims_its_output_and_refuses_one_holding_other_report_files(tmp_path: Path) -> None:
    """The finding: ``output: .`` overwrote the user's own report.md."""
    (tmp_path / "report.md").write_text("# mine\n")
    with pytest.raises(CompareError, match="holds report.md, which opentinker compare did not write"):
        check_output(tmp_path)
    assert not (tmp_path / MARKER).exists()
    fresh = tmp_path / "fresh"
    check_output(fresh)
    (fresh / "report.md").write_text("# a compare's\n")
    check_output(fresh)  # its own: rewritten freely
    old = tmp_path / "old-compare"  # written before the marker existed: its report.json says it is a compare's
    old.mkdir()
    (old / "report.json").write_text('{"variants": {}, "jobs": []}')
    (old / "report.md").write_text("# compare\n")
    check_output(old)
