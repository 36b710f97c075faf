"""``EnvSpec.difficulty_levels`` (issue 44): what a curriculum moves between travels with the spec."""

from __future__ import annotations

import pytest

from tinker_core import EnvSpec


def test_difficulty_levels_round_trip_and_are_omitted_when_empty():
    spec = EnvSpec(id="t/levels-v0", difficulty_levels=({"digits": 1}, {"digits": 2}))
    assert spec.to_dict()["difficulty_levels"] == [{"digits": 1}, {"digits": 2}]
    assert EnvSpec.from_json(spec.to_json()) == spec
    assert "difficulty_levels" not in EnvSpec(id="t/plain-v0").to_dict()  # older readers accept it


def test_a_difficulty_level_is_a_non_empty_mapping_of_json_kwargs():
    with pytest.raises(ValueError, match="non-empty mapping"):
        EnvSpec(id="t/levels-v0", difficulty_levels=({},))
    with pytest.raises(TypeError):
        EnvSpec(id="t/levels-v0", difficulty_levels=({"f": object()},))
