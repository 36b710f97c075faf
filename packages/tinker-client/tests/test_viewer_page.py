"""The viewer's page in a real headless browser (Debian's Chromium driven by playwright), used as
a person uses it: load a run, read the curves, move the step slider, filter to reward 0, open a
group, look at the token colours and the eval transcripts, and watch a run that keeps writing."""

from __future__ import annotations

from pathlib import Path

import pytest
from viewer_runs import GROUP_SIZE, GROUPS, append_step, write_run

from tinker_client.viewer.command import running

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser_page():
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium) to run the browser tests")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            # bypass_csp: playwright's wait_for_function evaluates strings, which the page's
            # Content-Security-Policy forbids; it also shows that the page's escaping alone holds
            page = browser.new_page(viewport={"width": 1280, "height": 900}, bypass_csp=True)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page
            assert errors == [], errors
        finally:
            browser.close()


def step_label(page, section: str) -> str:
    return page.inner_text(f"#{section} .step-label")


def test_curves_rollouts_groups_tokens_and_eval_transcripts(tmp_path, browser_page, record_property):
    page = browser_page
    first, second = write_run(tmp_path / "run-a", steps=5), write_run(tmp_path / "run-b", steps=3)
    with running([first, second]) as url:
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']")
        # curves: both runs overlaid, one path each; every metric in the list and in the grid
        page.select_option("#metric", "losses/total")
        assert page.locator("#chart path.series").count() == 2
        assert page.get_attribute("#chart path.series[data-run='0']", "data-points") == "5"
        assert page.get_attribute("#chart path.series[data-run='1']", "data-points") == "3"
        options = page.eval_on_selector_all("#metric option", "os => os.map(o => o.value)")
        assert options == ["env/reward_mean", "eval/accuracy", "losses/total", "time/step_s"]
        assert page.locator("#grid .mini-card").count() == 4
        before = page.get_attribute("#chart path.series[data-run='0']", "d")
        page.locator("#smooth").focus()
        page.keyboard.press("End")  # the most smoothing: the curve changes shape
        assert page.get_attribute("#chart path.series[data-run='0']", "d") != before
        page.uncheck("#runs input[aria-label='show run-b']")
        assert page.locator("#chart path.series").count() == 1

        # rollouts: the last step first; the slider moves through the steps
        page.click("#tabs [data-tab=rollouts]")
        page.wait_for_selector("#rollouts .episode")
        assert step_label(page, "rollouts") == "5"
        assert page.locator("#rollouts .episodes .episode").count() == GROUPS * GROUP_SIZE
        page.locator("#rollouts .step-slider").focus()
        page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowLeft")
        assert step_label(page, "rollouts") == "3"
        page.wait_for_function("document.querySelector('#rollouts .status').textContent === '12 episodes at step 3'")
        assert "What is 10 + 3?" in page.inner_text("#rollouts .episodes .episode >> nth=0")

        # filter to reward 0: only the wrong answers of step 3 are left
        page.fill("#rollouts .max-reward", "0")
        page.wait_for_function("document.querySelector('#rollouts .status').textContent === '6 episodes at step 3'")
        rewards = page.eval_on_selector_all("#rollouts .episodes .episode", "es => es.map(e => e.dataset.reward)")
        assert rewards == ["0"] * 6
        assert "wrong" in page.inner_text("#rollouts .episodes") and "correct" not in page.inner_text("#rollouts .episodes")

        # open a group: all its episodes side by side, the filtered-out ones too
        page.click("#rollouts .episodes .episode[data-group='1'] .group-link")
        page.wait_for_selector("#rollouts .group-view:not([hidden]) .episode")
        assert "step 3, group 1" in page.inner_text("#rollouts .group-head")
        group = page.eval_on_selector_all("#rollouts .group-columns .episode", "es => es.map(e => [e.dataset.group, e.dataset.reward])")
        assert group == [["1", "0"], ["1", "1"], ["1", "0"], ["1", "1"]]

        # the token view: one span per sampled token, coloured by its sampler logprob
        tokens = page.eval_on_selector_all("#rollouts .group-columns .episode >> nth=0 >> .tok",
                                           "ts => ts.map(t => [t.textContent, t.dataset.logprob, t.style.backgroundColor])")
        assert [t[0] for t in tokens] == ["1", "5", "\n"] and [t[1] for t in tokens] == ["-0.25", "-0.5", "-0.75"]  # 11 + 3, wrong
        assert len({t[2] for t in tokens}) == 3  # a lower probability, another colour
        page.select_option("#rollouts .colour", "advantage")
        page.wait_for_function("document.querySelector('#rollouts .episodes .tok').style.backgroundColor.startsWith('rgba(214, 39, 40')")

        shot = tmp_path / "viewer-rollouts.png"
        page.screenshot(path=str(shot), full_page=True)
        record_property("screenshot", str(shot))

        # held-out eval transcripts: eval episodes only, at the eval steps
        page.click("#tabs [data-tab=eval]")
        page.wait_for_selector("#eval .episode")
        assert step_label(page, "eval") == "4"
        assert page.locator("#eval .episodes .episode").count() == GROUPS
        assert page.inner_text("#eval .status") == f"{GROUPS} episodes at step 4"

        # config, checkpoints, phases
        page.click("#tabs [data-tab=config]")
        page.wait_for_function("document.querySelector('#config-json').textContent.includes('\"run-a\"')")
        page.click("#tabs [data-tab=checkpoints]")
        page.wait_for_selector("#checkpoint-table td")
        assert "step-000005" in page.inner_text("#checkpoint-table")
        page.click("#tabs [data-tab=trace]")
        page.wait_for_selector("#trace-body table")
        table = page.inner_text("#trace-body table")
        assert "rollout" in table and "60.0%" in table and "forward_backward" in table and "30.0%" in table


def test_the_page_follows_a_run_that_is_still_writing(tmp_path, browser_page):
    page = browser_page
    run = write_run(tmp_path / "live", steps=2, checkpoints=())
    with running([run]) as url:
        page.goto(url + "?poll=200")
        page.wait_for_selector("body[data-ready='1']")
        page.select_option("#metric", "losses/total")
        assert page.get_attribute("#chart path.series", "data-points") == "2"
        assert "running, step 2" in page.inner_text("#runs")
        append_step(run, 3)
        append_step(run, 4)
        page.wait_for_function("document.querySelector('#chart path.series').dataset.points === '4'")
        assert "running, step 4" in page.inner_text("#runs")
        assert page.eval_on_selector_all("#metric option", "os => os.map(o => o.value)").count("eval/accuracy") == 1

        page.click("#tabs [data-tab=rollouts]")
        page.wait_for_selector("#rollouts .episode")
        assert step_label(page, "rollouts") == "4"
        append_step(run, 5)  # the slider is at the last step: it follows to the new one
        page.wait_for_function("document.querySelector('#rollouts .step-label').textContent === '5'")
        page.wait_for_function("document.querySelector('#rollouts .status').textContent === '12 episodes at step 5'")
        assert "What is 10 + 5?" in page.inner_text("#rollouts .episodes .episode >> nth=0")
        page.locator("#rollouts .step-slider").focus()
        page.keyboard.press("Home")
        assert step_label(page, "rollouts") == "1"
        append_step(run, 6)  # away from the end: the page stays where the reader is
        page.wait_for_function("document.querySelector('#rollouts .step-slider').max === '5'")
        assert step_label(page, "rollouts") == "1"
        (run / "result.json").write_text('{"status": "completed", "step": 6}')
        page.wait_for_function("document.querySelector('#runs').innerText.includes('completed, step 6')")


def test_a_compare_report_opens_with_its_jobs(tmp_path, browser_page):
    page = browser_page
    report = tmp_path / "compare-estimators"
    write_run(report / "jobs" / "grpo" / "seed-0", steps=3)
    write_run(report / "jobs" / "rloo" / "seed-0", steps=4)
    (report / "report.json").write_text('{"variants": {}, "jobs": []}')
    (report / "report.md").write_text("# Compare estimators\n\n| variant | final eval/accuracy |\n")
    with running([report]) as url:
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']")
        assert [n.strip() for n in page.eval_on_selector_all("#runs .run b", "bs => bs.map(b => b.textContent)")] == [
            "compare-estimators", "grpo/seed-0", "rloo/seed-0"]
        page.select_option("#metric", "losses/total")
        assert page.locator("#chart path.series").count() == 2  # the jobs' curves overlaid
        page.click("#tabs [data-tab=report]")
        page.wait_for_selector("#report-body pre")
        assert "| variant | final eval/accuracy |" in page.inner_text("#report-body pre")
