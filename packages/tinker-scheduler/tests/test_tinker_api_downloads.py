"""Trained weights out of the Tinker gateway, through the unmodified ``tinker`` SDK and its CLI.

A real in-process scheduler (the tiny model) serves the gateway; the SDK trains a LoRA for a few
steps, ``save_weights_external`` exports it, ``RestClient.get_external_weights_urls`` signs one URL
per file and a plain ``urllib`` GET (as the SDK's download does) fetches them; ``tinker checkpoint
download`` does the whole path from a ``save_state`` checkpoint in a subprocess. The oracle: plain
peft loads the downloaded adapter onto the tiny base model, and its log-probabilities of a sequence
are the ones the trained model reported through the SDK (and not the untrained ones). Then what
must be refused: a tampered, expired or re-pointed URL (403), another tenant's checkpoint (404),
a deleted one (404), and sessions that are not the caller's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

torch = pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")
pytest.importorskip("peft")
pytest.importorskip("tinker_serve", reason="the Tinker gateway needs tinker-scheduler's http extra (tinker-serve)")

from tinker import types  # noqa: E402

from tinker_scheduler.tinker_api import serve  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
SEQ = [1, 20, 21, 22, 30, 31, 2]


@pytest.fixture
def gateway(make_scheduler):
    scheduler = make_scheduler(paused=True, training_host_backend="local")
    keys = {name: "tml-" + scheduler.store.add_tenant(name) for name in ("alice", "bob")}
    gw = serve(scheduler)
    yield gw, keys
    gw.stop()


def datum() -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(SEQ[:-1]),
                       loss_fn_inputs={"target_tokens": SEQ[1:], "weights": [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]})


def trained(service: tinker.ServiceClient, steps: int = 3):
    """A LoRA trained ``steps`` steps; its log-probabilities of SEQ before and after."""
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    before = training.forward([datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    for _ in range(steps):
        training.forward_backward([datum()], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=3e-2)).result()
    after = training.forward([datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    return training, before, after


def peft_logprobs(adapter_dir: Path, base_dir: Path) -> list[float]:
    """SEQ's log-probabilities under plain peft: the tiny base with the downloaded adapter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), str(adapter_dir)).eval()
    with torch.no_grad():
        logits = model(torch.tensor([SEQ[:-1]])).logits[0].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(SEQ[1:])[:, None])[:, 0].tolist()


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    from tinker_algos.model.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny")


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()


def status_of(url: str) -> int:
    try:
        fetch(url)
    except urllib.error.HTTPError as e:
        return e.code
    return 200


def test_sdk_exports_signs_and_downloads_the_trained_adapter(gateway, tiny_base, tmp_path) -> None:
    gw, keys = gateway
    service = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"])
    training, before, after = trained(service)
    assert after != pytest.approx(before, abs=1e-3)  # training moved the weights

    path = training.save_weights_external("final").result().path
    assert path == f"tinker://{training.model_id}/external_weights/final"
    rest = tinker.RestClient(base_url=gw.url, api_key=keys["alice"])
    listed = {c.tinker_path: c for c in rest.list_checkpoints(training.model_id).result().checkpoints}
    assert listed[path].checkpoint_type == "external" and listed[path].size_bytes > 0

    signed = rest.get_external_weights_urls(path).result()
    assert set(signed.urls) == {"adapter_config.json", "adapter_model.safetensors"}
    assert all(u.startswith(gw.url) for u in signed.urls.values())  # served by the gateway itself
    assert 0 < (signed.expires.timestamp() - time.time()) <= 3600
    out = tmp_path / "adapter"
    out.mkdir()
    for name, url in signed.urls.items():
        (out / name).write_bytes(fetch(url))  # no key: the URL is the credential

    # the oracle: plain peft on the downloaded files gives the trained model's log-probabilities
    assert peft_logprobs(out, tiny_base) == pytest.approx(after, abs=1e-4)
    assert peft_logprobs(out, tiny_base) != pytest.approx(before, abs=1e-3)

    # deleting the export: its listing, its files and its URLs are gone (a still-signed URL is 404)
    rest.delete_checkpoint_from_tinker_path(path).result()
    assert status_of(signed.urls["adapter_model.safetensors"]) == 404
    with pytest.raises(tinker.NotFoundError):
        rest.get_external_weights_urls(path).result()


def test_an_age_encrypted_export_decrypts_to_the_trained_adapter(gateway, tiny_base, tmp_path) -> None:
    """``age_encryption_recipients`` (what the cookbook's ``weights.download`` asks for): every file
    is ``<name>.age``, and decrypting with the identity gives the trained adapter back."""
    pyrage = pytest.importorskip("pyrage")
    gw, keys = gateway
    service = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"])
    training, _, after = trained(service)
    identity = pyrage.x25519.Identity.generate()
    with pytest.raises(tinker.BadRequestError, match=r"age_encryption_recipients\[0\]"):
        training.save_weights_external("bad", age_encryption_recipients=["age1nope"]).result()
    path = training.save_weights_external("sealed", age_encryption_recipients=[str(identity.to_public())]).result().path
    urls = tinker.RestClient(base_url=gw.url, api_key=keys["alice"]).get_external_weights_urls(path).result().urls
    assert set(urls) == {"adapter_config.json.age", "adapter_model.safetensors.age"}
    out = tmp_path / "adapter"
    out.mkdir()
    for name, url in urls.items():
        sealed = fetch(url)
        assert b"adapter" not in sealed[:4096] and sealed.startswith(b"age-encryption.org/v1")
        (out / name.removesuffix(".age")).write_bytes(pyrage.decrypt(sealed, [identity]))
    assert peft_logprobs(out, tiny_base) == pytest.approx(after, abs=1e-4)


def test_tinker_checkpoint_download_cli_fetches_a_saved_state(gateway, tiny_base, tmp_path) -> None:
    """``tinker checkpoint download tinker://.../weights/<name>``, pointed at the gateway by the
    SDK's own variables: it loads the state into a new run, exports it, downloads and deletes the
    export."""
    gw, keys = gateway
    service = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"])
    training, _, after = trained(service)
    state = training.save_state("ckpt").result().path
    env = {**os.environ, "TINKER_BASE_URL": gw.url, "TINKER_API_KEY": keys["alice"], "TINKER_TELEMETRY": "0"}
    r = subprocess.run([sys.executable, "-m", "tinker.cli", "checkpoint", "download", state, "--output", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / state.removeprefix("tinker://").replace("/", "_")
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert peft_logprobs(out, tiny_base) == pytest.approx(after, abs=1e-4)
    # the temporary export was deleted; the state remains
    rest = tinker.RestClient(base_url=gw.url, api_key=keys["alice"])
    kinds = {c.checkpoint_type for c in rest.list_user_checkpoints().result().checkpoints}
    assert kinds == {"training"}


def test_signed_urls_refuse_tampering_expiry_and_other_tenants(gateway) -> None:
    gw, keys = gateway
    alice = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"])
    bob = tinker.ServiceClient(base_url=gw.url, api_key=keys["bob"])
    a_path = alice.create_lora_training_client(base_model="tiny", rank=2).result().save_weights_external("a").result().path
    b_path = bob.create_lora_training_client(base_model="tiny", rank=2).result().save_weights_external("b").result().path
    a_rest = tinker.RestClient(base_url=gw.url, api_key=keys["alice"])
    b_rest = tinker.RestClient(base_url=gw.url, api_key=keys["bob"])
    url = a_rest.get_external_weights_urls(a_path).result().urls["adapter_config.json"]
    assert status_of(url) == 200

    # another tenant's checkpoint: not found, as none
    with pytest.raises(tinker.NotFoundError):
        b_rest.get_external_weights_urls(a_path).result()
    # bob's valid URL re-pointed at alice's checkpoint, a changed signature, time or file: 403
    b_url = b_rest.get_external_weights_urls(b_path).result().urls["adapter_config.json"]
    a_model, b_model = (p.removeprefix("tinker://").split("/")[0] for p in (a_path, b_path))
    from urllib.parse import quote

    repointed = b_url.replace(quote(b_model, safe=""), quote(a_model, safe="")).replace("/b/", "/a/")
    assert status_of(repointed) == 403
    query = parse_qs(urlsplit(url).query)
    sig, expires = query["signature"][0], query["expires"][0]
    assert status_of(url.replace(sig, ("0" if sig[0] != "0" else "1") + sig[1:])) == 403
    assert status_of(url.replace(f"expires={expires}", f"expires={int(expires) + 3600}")) == 403
    assert status_of(url.replace("adapter_config.json", "adapter_model.safetensors")) == 403
    assert status_of(url.split("?")[0]) == 403  # no signature at all
    # a correctly signed URL whose time has passed
    downloads = gw.app.state.context.downloads
    raw = urlsplit(url).path
    past = int(time.time()) - 1
    expired = f"{gw.url}{raw}?expires={past}&signature={downloads.signer.sign(raw, past)}"
    with pytest.raises(urllib.error.HTTPError) as e:
        fetch(expired)
    assert e.value.code == 403 and b"expired" in e.value.read()
    # a path that leaves the export, even when signed: not served
    escape = raw.rsplit("/", 1)[0] + "/..%2F..%2Fstates"
    assert status_of(f"{gw.url}{escape}?expires={int(expires)}&signature={downloads.signer.sign(escape, int(expires))}") == 404

    # only external weights have download URLs; a TTL outside Tinker's bounds is refused
    with pytest.raises(ValueError, match="external weights"):
        a_rest.get_external_weights_urls(a_path.replace("external_weights", "weights")).result()
    with pytest.raises(tinker.BadRequestError, match="ttl_seconds"):
        a_rest.set_checkpoint_ttl_from_tinker_path(a_path, 10).result()


def test_checkpoint_ttl_expires_and_deletes_the_checkpoint(gateway) -> None:
    gw, keys = gateway
    service = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"])
    training = service.create_lora_training_client(base_model="tiny", rank=2).result()
    kept = training.save_state("kept").result().path
    short = training.save_weights_external("short", ttl_seconds=3600).result().path
    rest = tinker.RestClient(base_url=gw.url, api_key=keys["alice"])
    listed = {c.tinker_path: c for c in rest.list_checkpoints(training.model_id).result().checkpoints}
    assert listed[kept].expires_at is None
    assert 3500 < listed[short].expires_at.timestamp() - time.time() <= 3600
    rest.set_checkpoint_ttl_from_tinker_path(kept, 7200).result()
    rest.set_checkpoint_ttl_from_tinker_path(short, None).result()  # kept until deleted after all
    gw.app.state.expiry.expire(now=time.time() + 3601)  # as the expiry thread would, an hour on
    paths = {c.tinker_path for c in rest.list_checkpoints(training.model_id).result().checkpoints}
    assert paths == {kept, short}
    gw.app.state.expiry.expire(now=time.time() + 7201)
    paths = {c.tinker_path for c in rest.list_checkpoints(training.model_id).result().checkpoints}
    assert paths == {short}
    with pytest.raises(tinker.NotFoundError):
        service.create_training_client_from_state(kept).result()


def test_list_and_get_sessions_show_only_the_callers_own(gateway) -> None:
    gw, keys = gateway
    alice = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"], user_metadata={"team": "a"})
    bob = tinker.ServiceClient(base_url=gw.url, api_key=keys["bob"])
    training = alice.create_lora_training_client(base_model="tiny", rank=2).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    bob.create_lora_training_client(base_model="tiny", rank=2).result()
    a_rest = tinker.RestClient(base_url=gw.url, api_key=keys["alice"])
    b_rest = tinker.RestClient(base_url=gw.url, api_key=keys["bob"])

    a_sessions = a_rest.list_sessions().result().sessions
    b_sessions = b_rest.list_sessions().result().sessions
    assert alice.holder.get_session_id() in a_sessions and not set(a_sessions) & set(b_sessions)
    got = a_rest.get_session(alice.holder.get_session_id()).result()
    assert got.training_run_ids == [training.model_id]
    assert got.sampler_ids == [sampler._sampling_session_id]
    assert got.user_metadata == {"team": "a"}
    with pytest.raises(tinker.NotFoundError):
        b_rest.get_session(alice.holder.get_session_id()).result()
    with pytest.raises(tinker.BadRequestError, match="limit"):
        a_rest.list_sessions(limit=0).result()


def test_an_older_store_gains_the_new_columns(tmp_path) -> None:
    """A store written before sessions had metadata and checkpoints a TTL opens and works."""
    import sqlite3

    from tinker_scheduler.tinker_api.records import Records

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.executescript("""
            CREATE TABLE tinker_sessions (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_at REAL NOT NULL,
                                          last_seen REAL NOT NULL, state TEXT NOT NULL DEFAULT 'active');
            CREATE TABLE tinker_checkpoints (model_id TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,
                                             tenant TEXT NOT NULL, file TEXT NOT NULL, size_bytes INTEGER,
                                             created_at REAL NOT NULL, PRIMARY KEY (model_id, kind, name));
            INSERT INTO tinker_sessions VALUES ('cs-old', 'alice', 1.0, 1.0, 'active');
            INSERT INTO tinker_checkpoints VALUES ('m', 'weights', 'w', 'alice', '/nowhere', 3, 1.0);
        """)
    records = Records(db)
    try:
        old = records.tinker_session("alice", "cs-old")
        assert old is not None and old.user_metadata == {} and old.display_name is None
        assert records.checkpoint("alice", "m", "weights", "w").expires_at is None
        records.add_tinker_session("cs-new", "alice", {"k": "v"}, "mine")
        assert records.tinker_session("alice", "cs-new").user_metadata == {"k": "v"}
        assert records.tinker_sessions("alice", 10, 0) == ["cs-new", "cs-old"]
        assert records.tinker_session("bob", "cs-new") is None
        records.set_checkpoint_expiry("alice", "m", "weights", "w", 5.0)
        assert [c.name for _, c in records.expired_checkpoints(6.0)] == ["w"]
        assert records.expired_checkpoints(4.0) == []
    finally:
        records.close()
