"""lm-evaluation-harness and inspect-ai as real clients of a real ``opentinker serve`` process on
127.0.0.1 serving the tiny model: the commands of docs/guides/evaluate-with-harnesses.md, run as
the page shows them (the port aside) in a directory holding the page's files
(integration-tests/data/harness/: the page must show them verbatim).

Oracles: every loglikelihood lm-eval computes for the multiple-choice task equals the sum of the
continuation tokens' logprobs computed by transformers on the served model's directory, and its
``is_greedy`` flag equals "every continuation token is the argmax"; each lm-eval generation
equals transformers' greedy ``generate``; each inspect-ai generation equals the same chat request
sent to the server directly. Nothing reaches the hub: HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the hub (read at import by HF libraries)
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

pytest.importorskip("lm_eval", reason="lm-eval is in the workspace's dev group (uv sync --all-packages installs it)")
pytest.importorskip("inspect_ai", reason="inspect-ai is in the workspace's dev group (uv sync --all-packages installs it)")

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guides" / "evaluate-with-harnesses.md"
DATA = Path(__file__).resolve().parent / "data" / "harness"
GUIDE_PORT = "127.0.0.1:8000"
BIN = Path(sys.executable).parent


def guide_blocks(marker: str) -> list[tuple[str, str]]:
    """``(what the marker names, block text)`` for each fenced block the page marks with
    ``<!-- MARKER ... -->``."""
    text = GUIDE.read_text(encoding="utf-8")
    return re.findall(rf"^<!-- {marker}(?::\s*(\S*))?\s*-->\n```[a-z]*\n(.*?)^```", text, flags=re.M | re.S)


def guide_commands() -> list[tuple[str, list[str]]]:
    """Each ``harness-test`` block: its commands (``$ `` lines with their continuations, joined)
    and the output lines it shows."""
    out = []
    for _, block in guide_blocks("harness-test"):
        commands: list[str] = []
        shown: list[str] = []
        continuing = False
        for line in block.splitlines():
            if continuing:
                commands[-1] += "\n" + line
            elif line.startswith("$ "):
                commands.append(line[2:])
            else:
                shown.append(line)
            continuing = line.rstrip().endswith("\\")
        out.append(("\n".join(commands), shown))
    return out


def test_the_guide_shows_the_files_the_test_runs():
    files = guide_blocks("file")
    assert sorted(name for name, _ in files) == sorted(p.name for p in DATA.iterdir() if p.is_file())
    for name, text in files:
        assert text == (DATA / name).read_text(encoding="utf-8"), f"the guide's {name} differs from {DATA / name}"
    first = [c.split()[:2] for c, _ in guide_commands()]
    assert first[0] == ["opentinker", "serve"] and len(first) == 3


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """The guide's ``opentinker serve`` command on a free port, in a directory holding the
    guide's files; yields (base URL, that directory, the environment the commands run with)."""
    work = tmp_path_factory.mktemp("harness")
    for p in DATA.iterdir():
        shutil.copy(p, work / p.name)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "OPENTINKER_CACHE": str(work / ".cache" / "opentinker"), "HF_HOME": str(work / ".cache" / "hf"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "INSPECT_LOG_DIR": str(work / "logs"), "NO_COLOR": "1"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    serve = guide_commands()[0][0]
    assert serve.startswith("opentinker serve tiny") and "--port 8000" in serve
    proc = subprocess.Popen(["bash", "-c", "exec " + serve.replace("8000", port)], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"opentinker serve did not start:\n{proc.stdout.read()[-3000:]}")
            time.sleep(0.5)
        yield url, work, env
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def run_guide_block(index: int, served: tuple[str, Path, dict[str, str]]) -> tuple[str, list[str]]:
    url, work, env = served
    commands, shown = guide_commands()[index]
    port = url.rsplit(":", 1)[1]
    script = "set -e\n" + commands.replace(GUIDE_PORT, f"127.0.0.1:{port}")
    result = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    return output, [line.replace(GUIDE_PORT, f"127.0.0.1:{port}") for line in shown]


@pytest.fixture(scope="module")
def oracle_model(served):
    """transformers' own model and tokenizer from the directory the server serves (``tiny``
    resolves to the preset built in the server's cache)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinker_algos.model.model_files import resolve_model

    url, _, env = served
    assert httpx.get(f"{url}/v1/models/tiny", timeout=30).json()["root"] == "tiny"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENTINKER_CACHE", env["OPENTINKER_CACHE"])  # the directory the server built and serves
        root = resolve_model("tiny")
    model = AutoModelForCausalLM.from_pretrained(root, local_files_only=True)
    model.eval()
    return model, AutoTokenizer.from_pretrained(root, local_files_only=True)


def samples(work: Path, task: str) -> list[dict]:
    [path] = (work / "results" / "tiny").glob(f"samples_{task}_*.jsonl")
    return sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda s: s["doc_id"])


def test_lm_eval_multiple_choice_and_generation_match_the_model(served, oracle_model):
    import torch

    output, shown = run_guide_block(1, served)
    table = [line for line in shown if line.startswith("|")]
    assert len(table) == 5
    for line in table:  # the page shows the table this run prints
        assert line in output.splitlines(), f"{line!r} not in lm_eval's output:\n{output[-3000:]}"
    assert "Using remote tokenizer backend" in output  # the default tokenizer_backend=auto found the server's

    model, tok = oracle_model
    work = served[1]
    mc = samples(work, "sums_mc")
    assert len(mc) == 10
    right = 0
    for sample in mc:
        question, choices = sample["doc"]["question"], sample["doc"]["choices"]
        context = tok(question, add_special_tokens=False)["input_ids"]
        want = []
        for choice, resp in zip(choices, sample["resps"], strict=True):
            ids = context + tok(choice, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, :-1].float(), -1)
            targets = torch.tensor(ids[len(context):])
            rows = logprobs[len(context) - 1:]
            loglikelihood = float(rows.gather(-1, targets[:, None]).sum())
            greedy = bool((rows.argmax(-1) == targets).all())
            got_ll, got_greedy = resp[0]
            assert float(got_ll) == pytest.approx(loglikelihood, abs=1e-4), (question, choice)
            assert (got_greedy == "True") == greedy, (question, choice)
            want.append(loglikelihood)
        right += max(range(len(want)), key=want.__getitem__) == sample["doc"]["answer"]
        assert sample["acc"] == float(max(range(len(want)), key=want.__getitem__) == sample["doc"]["answer"])
    results = json.loads(next((work / "results" / "tiny").glob("results_*.json")).read_text())
    assert results["results"]["sums_mc"]["acc,none"] == pytest.approx(right / len(mc))

    gen = samples(work, "sums_gen")
    assert len(gen) == 10
    for sample in gen:
        ids = tok(sample["doc"]["question"], add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
        text = tok.decode(out[0, len(ids):], skip_special_tokens=True).split("\n")[0]
        assert sample["resps"][0][0] == text, sample["doc"]


def test_inspect_ai_runs_both_tasks_through_the_chat_route(served):
    from inspect_ai.log import list_eval_logs, read_eval_log

    url, work, _ = served
    output, _ = run_guide_block(2, served)
    logs = {log.eval.task: log for log in (read_eval_log(info) for info in list_eval_logs(str(work / "logs")))}
    assert set(logs) == {"sums_gen", "sums_mc"}, output[-3000:]
    for name, log in logs.items():
        assert log.status == "success", (name, log.error)
        assert log.eval.model == "openai-api/opentinker/tiny"
        assert len(log.samples) == 10
        for sample in log.samples:
            sent = [{"role": m.role, "content": m.text} for m in sample.messages[:-1]]
            direct = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
                "model": "tiny", "messages": sent, "temperature": 0, "max_tokens": 8}).json()
            assert sample.output.completion == direct["choices"][0]["message"]["content"], (name, sample.id)
        assert log.results.scores[0].metrics["accuracy"].value == pytest.approx(
            sum(s.scores[next(iter(s.scores))].value == "C" for s in log.samples) / 10)
