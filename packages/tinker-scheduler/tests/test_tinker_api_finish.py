"""The end of a ``with tinker.ServiceClient(...)`` block (how tinker-cookbook's RL trainer holds
it) posts ``sessions/{id}/finish``; the gateway answers it for the caller's own session only."""

from __future__ import annotations

import os

import pytest

tinker = pytest.importorskip("tinker")
httpx = pytest.importorskip("httpx")
pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from tinker_scheduler.tinker_api import serve  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")


def test_closing_a_service_client_finishes_its_session(make_scheduler) -> None:
    scheduler = make_scheduler(paused=True, training_host_backend="local")
    keys = {name: "tml-" + scheduler.store.add_tenant(name) for name in ("alice", "bob")}
    gw = serve(scheduler)
    try:
        with tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"]) as service:
            assert service.get_server_capabilities().supported_models  # a live session
        session = httpx.post(f"{gw.url}/api/v1/create_session", headers={"X-API-Key": keys["alice"]}, json={}).json()
        finish = f"{gw.url}/api/v1/sessions/{session['session_id']}/finish"
        assert httpx.post(finish, headers={"X-API-Key": keys["bob"]}, json={}).status_code == 404  # not bob's
        assert httpx.post(finish, headers={"X-API-Key": keys["alice"]}, json={}).status_code == 200
    finally:
        gw.stop()
