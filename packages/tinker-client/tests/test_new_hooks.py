"""The templates' cookiecutter hooks (``tinker_client.new_hooks``), called as the hooks call them."""

from __future__ import annotations

import json

import pytest

from tinker_client.new_hooks import answer_problems, check_answers, keep_variant

GOOD = {"name": "word-count", "project_name": "tinker-loss-word-count", "__module": "tinker_loss_word_count",
        "version": "0.1.0", "_template": "/somewhere/templates/loss"}


def test_good_answers_pass():
    assert answer_problems(GOOD) == []
    assert answer_problems({**GOOD, "task": "main"}) == []
    with pytest.raises(SystemExit) as exit_:
        check_answers(json.dumps(GOOD))
    assert exit_.value.code == 0


def test_every_bad_answer_is_named_on_its_own_line(capsys):
    bad = {**GOOD, "name": "Word Count", "task": "main-v1", "project_name": "-x", "version": "one"}
    with pytest.raises(SystemExit) as exit_:
        check_answers(json.dumps(bad))
    assert exit_.value.code == 1
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[1] for line in lines] == ["name", "task", "project_name", "version"]
    assert all(line.startswith("error: ") for line in lines)
    assert "e.g. 'tinker-loss-word-count'" in lines[2]


def test_the_estimator_template_names_its_own_distribution_prefix():
    bad = {**GOOD, "project_name": "-x", "_template": "templates/advantage-estimator"}
    assert "e.g. 'tinker-estimator-word-count'" in answer_problems(bad)[0]


def test_a_module_name_that_is_not_an_identifier_is_refused():
    (problem,) = answer_problems({**GOOD, "project_name": "9-lives", "__module": "9_lives"})
    assert "module name '9_lives'" in problem


def test_keep_variant_moves_the_chosen_files_into_place_and_drops_the_rest(tmp_path):
    for choice, text in (("a", "chosen"), ("b", "dropped")):
        (tmp_path / "_variants" / choice / "src").mkdir(parents=True)
        (tmp_path / "_variants" / choice / "src" / "impl.py").write_text(text)
    (tmp_path / "_variants" / "a" / "__pycache__").mkdir()
    keep_variant("a", tmp_path)
    assert (tmp_path / "src" / "impl.py").read_text() == "chosen"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_an_unknown_variant_is_an_error(tmp_path):
    (tmp_path / "_variants" / "a").mkdir(parents=True)
    with pytest.raises(SystemExit, match="no variant 'z'"):
        keep_variant("z", tmp_path)
