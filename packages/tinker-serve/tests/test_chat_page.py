"""The chat page in a real headless browser (Debian's Chromium driven by playwright): it lists the
models, streams an answer into the page, and the answer is the API's own. A screenshot is saved
under the test's tmp_path and its path printed (and recorded as the ``screenshot`` property)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker_serve.app import create_app
from tinker_serve.served import ServedModels

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def test_the_chat_page_streams_an_answer_in_a_headless_browser(tiny_dir, tmp_path, record_property, helpers):
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium) to run the browser test")
    import httpx
    from playwright.sync_api import sync_playwright

    from tinker_algos.model.models import PolicyModel

    served = ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "tiny", max_batch=4)
    with helpers.live_server(create_app(served)) as url:
        expected = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
            "model": "tiny", "messages": [{"role": "user", "content": "hello"}], "temperature": 0, "max_tokens": 24,
        }).json()["choices"][0]["message"]["content"]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
            try:
                page = browser.new_page()
                page.goto(url + "/")
                page.wait_for_selector("#model option[value='tiny']", state="attached")
                page.fill("#temperature", "0")
                page.fill("#max-tokens", "24")
                page.fill("#prompt", "hello")
                page.click("#send")
                page.wait_for_selector(".assistant[data-state='done']", timeout=60_000)
                shot = tmp_path / "chat-page.png"
                page.screenshot(path=str(shot), full_page=True)
                print(f"artifact: {shot}")
                record_property("screenshot", str(shot))
                assert page.inner_text(".user") == "hello"
                assert page.inner_text(".assistant") == expected.strip() or page.text_content(".assistant") == expected
                assert page.locator(".error").count() == 0
            finally:
                browser.close()
    assert shot.stat().st_size > 1000
