"""A job's ``model.chat_template`` file is a server path like a data file: confined to the model
roots and the tenant's own runs (else a job could render any server file into its prompts)."""

from __future__ import annotations

import pytest

from tinker_core.config import parse_config
from tinker_scheduler.errors import StatusError
from tinker_scheduler.paths import PathPolicy


def test_a_chat_template_file_outside_the_allowed_roots_is_refused_naming_the_field(tmp_path) -> None:
    runs, models, private = tmp_path / "runs", tmp_path / "models", tmp_path / "private"
    for d in (runs / "alice", models, private):
        d.mkdir(parents=True)
    (models / "chatml.jinja").write_text("{{ messages[0]['content'] }}")
    (private / "secret.jinja").write_text("secret")
    policy = PathPolicy(runs, [models])

    def job(chat_template: str):
        return parse_config(
            {"model": {"name": "tiny", "chat_template": chat_template}, "algorithm": {"name": "sft", "data": str(models / "chatml.jinja")}},
            check_plugins=False,
        )

    for allowed in ("auto", "tokenizer", "none", str(models / "chatml.jinja")):
        policy.check_job(job(allowed), "alice")
    for refused in (str(private / "secret.jinja"), str(private / "missing.jinja")):
        with pytest.raises(StatusError) as info:
            policy.check_job(job(refused), "alice")
        assert info.value.code == "PERMISSION_DENIED" and str(info.value).startswith("model.chat_template: ")
