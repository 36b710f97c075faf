"""docs/guides/serving.md's Python, run against a live server (the docs test skips that page).

The tiny model stands in for SmolLM2 under the guide's model name, with the arithmetic run's
adapter as ``sums``; only the server's address is changed in the code."""

from __future__ import annotations

import re
from pathlib import Path

from tinker_serve.app import create_app
from tinker_serve.served import ServedModels

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "serving.md"


def test_the_serving_guides_python_runs_against_a_live_server(tiny_dir, arithmetic_run, helpers, capsys):
    from tinker_algos.model.models import PolicyModel

    text = GUIDE.read_text(encoding="utf-8")
    # the section on serving from a scheduler needs a live scheduler with a finished job:
    # packages/tinker-scheduler/tests/test_serve_route_e2e.py makes the same calls there
    local, scheduler = text.split("## Serve from the scheduler")
    assert "test_serve_route_e2e.py" in scheduler
    blocks = re.findall(r"```python\n(.*?)```", local, flags=re.S)
    assert blocks and "docs-test: skip" in text[:500]
    served = ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "smollm2-135m-instruct")
    served.load_adapter("sums", arithmetic_run)
    with helpers.live_server(create_app(served)) as url:
        namespace: dict = {}
        for block in blocks:
            exec(compile(block.replace("http://127.0.0.1:8000", url), str(GUIDE), "exec"), namespace)
    assert "['smollm2-135m-instruct', 'sums']" in capsys.readouterr().out
    assert namespace["completion"].choices[0].logprobs is not None
