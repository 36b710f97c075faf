"""``opentinker export --push-to-hub REPO``: against a local stand-in of the Hugging Face Hub's
upload API (``HF_ENDPOINT``), no network -- the repo is created (private when asked) and holds
exactly the exported files, which load with plain peft after a download; bad input and a missing
token or ``HF_HUB_OFFLINE`` are one error line, before any export work where they can be.

The stand-in serves the three endpoints ``HfApi.create_repo`` and ``HfApi.upload_folder`` call:

* ``POST /api/repos/create`` -- ``{name, organization, visibility, type}``; 409 when it exists.
* ``POST /api/models/{repo}/preupload/{revision}`` -- answers ``uploadMode: regular`` for every
  file, so the client sends contents inline (base64 in the commit) instead of through LFS/Xet
  storage, which the stand-in does not implement (the real Hub takes weights through Xet).
* ``POST /api/models/{repo}/commit/{revision}`` -- the NDJSON commit (a ``header`` line, then
  ``file`` lines); the files are kept, and ``commitUrl``/``commitOid`` returned.

Every request needs ``Authorization: Bearer <token>``; any other endpoint is a 404 that is
recorded (``unknown``), so a test sees when the client calls one the stand-in lacks.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tinker_algos import plugin, train

_REPO = r"(?P<repo>[^/]+(?:/[^/]+)?)"
PREUPLOAD = re.compile(rf"/api/models/{_REPO}/preupload/(?P<rev>[^/?]+)")
COMMIT = re.compile(rf"/api/models/{_REPO}/commit/(?P<rev>[^/?]+)")


@dataclass
class Repo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)  # commit messages, oldest first


class HubStandIn:
    """Serve on ``127.0.0.1`` in a thread; ``url`` is the endpoint to give ``HF_ENDPOINT``."""

    def __init__(self, token: str, user: str = "standin-user") -> None:
        self.token, self.user = token, user
        self.repos: dict[str, Repo] = {}
        self.unknown: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                hub.handle(self)

            def do_GET(self) -> None:  # noqa: N802
                hub.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        body = req.rfile.read(int(req.headers.get("Content-Length") or 0))
        if req.headers.get("Authorization") != f"Bearer {self.token}":
            return _reply(req, 401, {"error": "Invalid credentials in Authorization header"})
        path = req.path.split("?", 1)[0]
        if req.command == "POST" and path == "/api/repos/create":
            return self.create(req, json.loads(body))
        if req.command == "POST" and (m := PREUPLOAD.fullmatch(path)):
            if m["repo"] not in self.repos:
                return _reply(req, 404, {"error": "Repository not found"})
            files = json.loads(body)["files"]
            return _reply(req, 200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]})
        if req.command == "POST" and (m := COMMIT.fullmatch(path)):
            return self.commit(req, m["repo"], body)
        self.unknown.append(f"{req.command} {req.path}")
        _reply(req, 404, {"error": f"the stand-in does not serve {req.command} {path}"})

    def create(self, req: BaseHTTPRequestHandler, payload: dict[str, Any]) -> None:
        repo_id = f"{payload.get('organization') or self.user}/{payload['name']}"
        if repo_id in self.repos:
            return _reply(req, 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo_id}"})
        private = payload.get("visibility") == "private" or bool(payload.get("private"))
        self.repos[repo_id] = Repo(private=private)
        _reply(req, 200, {"url": f"{self.url}/{repo_id}", "name": repo_id})

    def commit(self, req: BaseHTTPRequestHandler, repo_id: str, body: bytes) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return _reply(req, 404, {"error": "Repository not found"})
        for line in body.splitlines():
            item = json.loads(line)
            if item["key"] == "header":
                repo.commits.append(item["value"]["summary"])
            elif item["key"] == "file" and item["value"].get("encoding") == "base64":
                repo.files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            else:
                return _reply(req, 400, {"error": f"the stand-in takes inline base64 files only, got {item['key']}"})
        oid = hashlib.sha1(body).hexdigest()
        _reply(req, 200, {"commitUrl": f"{self.url}/{repo_id}/commit/{oid}", "commitOid": oid, "success": True})


def _reply(req: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    req.send_response(status)
    req.send_header("Content-Type", "application/json")
    req.send_header("Content-Length", str(len(data)))
    req.end_headers()
    req.wfile.write(data)


# ---- the tests ----------------------------------------------------------------------------------

TOKEN = "hf_standin_token"

pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory, only_tinker_algos_plugins: None) -> Path:
    """A one-step tiny LoRA SFT run from a JSONL file."""
    d = tmp_path_factory.mktemp("push")
    data = d / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "completion": f"{2 * a}\n"}) + "\n" for a in range(4)))
    cfg = {"seed": 0, "model": {"name": "tiny"}, "lora": {"rank": 4, "alpha": 8},
           "algorithm": {"name": "sft", "steps": 1, "batch_size": 2, "data": str(data)},
           "logging": {"tensorboard": False, "plot": False}}
    assert train(cfg, run_dir=d / "run").status == "completed"
    return d / "run"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The stand-in, with huggingface_hub pointed at it (HF_ENDPOINT), online, with a token."""
    from huggingface_hub import constants

    with HubStandIn(TOKEN) as server:
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        yield server


def cli() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command()(lambda: None)
    plugin.opentinker_register_commands(cli=app)
    return app


def invoke(*args: object) -> Any:
    return CliRunner().invoke(cli(), [str(a) for a in args])


def test_push_to_hub_creates_the_repo_and_uploads_exactly_the_export(lora_run: Path, tmp_path: Path, hub: Any) -> None:
    out = tmp_path / "adapter"
    result = invoke("export", lora_run, "-o", out, "--push-to-hub", "me/tiny-adapter", "--private")
    assert result.exit_code == 0, result.output
    assert f"pushed {out} to {hub.url}/me/tiny-adapter (" in result.stdout and "/commit/" in result.stdout
    repo = hub.repos["me/tiny-adapter"]
    assert repo.private and repo.commits == [f"opentinker export of {lora_run / 'checkpoints' / 'step-000001'} (step 1)"]
    local = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert repo.files == local and {"adapter_config.json", "adapter_model.safetensors", "base/model.safetensors"} <= set(local)
    assert json.loads(repo.files["adapter_config.json"])["base_model_name_or_path"] == "base"
    assert hub.unknown == []

    # a second push to the same repo is one more commit (create_repo with exist_ok), public stays private
    again = invoke("export", lora_run, "-o", out, "--force", "--push-to-hub", "me/tiny-adapter")
    assert again.exit_code == 0, again.output
    assert len(repo.commits) == 2 and repo.private and hub.unknown == []


def test_the_pushed_files_load_with_plain_peft_from_a_download(lora_run: Path, tmp_path: Path, hub: Any) -> None:
    """What the repo holds, written back out as a download would, is a loadable adapter with its base."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    assert invoke("export", lora_run, "-o", tmp_path / "adapter", "--push-to-hub", "tiny").exit_code == 0
    download = tmp_path / "download"
    for name, data in hub.repos["standin-user/tiny"].files.items():
        (download / name).parent.mkdir(parents=True, exist_ok=True)
        (download / name).write_bytes(data)
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        got = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(download / "base"), download).eval()(input_ids=ids).logits
        want = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tmp_path / "adapter" / "base"), tmp_path / "adapter").eval()(input_ids=ids).logits
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--push-to-hub", "bad repo//id"], {}, "error: --push-to-hub 'bad repo//id': not a repo id"),
        (["--push-to-hub", "me/x"], {"offline": True}, "error: --push-to-hub me/x: HF_HUB_OFFLINE is set, so nothing can be uploaded; unset it to push"),
        (["--push-to-hub", "me/x"], {"HF_TOKEN": "wrong"}, "error: --push-to-hub me/x: the Hub refused the upload ("),
    ],
    ids=["bad-id", "offline", "wrong-token"],
)
def test_a_push_that_cannot_happen_is_one_error_line_at_the_end(lora_run: Path, tmp_path: Path, hub: Any, monkeypatch: pytest.MonkeyPatch,
                                                     args: list[str], env: dict[str, Any], message: str) -> None:
    from huggingface_hub import constants

    if env.pop("offline", False):
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "adapter"
    result = invoke("export", lora_run, "-o", out, *args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message) and result.stderr.strip().endswith(errors[0]), result.stderr
    assert out.exists() == (message.endswith("refused the upload (")), "checks that need no upload fail before the export"
    assert hub.repos == {}


def test_without_a_token_the_error_says_how_to_log_in(lora_run: Path, tmp_path: Path, hub: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored login either
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
    result = invoke("export", lora_run, "-o", tmp_path / "adapter", "--push-to-hub", "me/x")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == "error: --push-to-hub me/x: no Hugging Face token; set HF_TOKEN or run `hf auth login`"
    assert not (tmp_path / "adapter").exists() and hub.repos == {}  # refused before the export
