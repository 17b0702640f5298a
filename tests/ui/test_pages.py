"""The experiment pages in a real headless Chromium, logged in to the real Airflow: the nav entry,
an experiment from a finished run, a trial, the charts, the table, a filter, the CSV, the dark
theme, an XSS payload that stays text, an anonymous visit refused, a path prefix. Screenshots go
to $TRIALFLOW_SCREENSHOTS when set (README's images come from there)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.pages import XSS, UiSetup, login
from tests.helpers.screens import canvas_drawn, shot

pytestmark = [pytest.mark.integration, pytest.mark.ui]


def test_nav_list_experiment_and_charts(browser, ui: UiSetup):
    page = login(browser, ui)
    page.goto(f"{ui.base}/")
    page.get_by_role("link", name="Experiments").first.click()
    page.wait_for_selector("[data-testid=experiment-row]", timeout=30000)
    assert page.evaluate("window.__xss") is None
    rows = page.locator("[data-testid=experiment-row]")
    assert rows.count() >= 2
    page.fill("[data-testid=experiment-search]", ui.experiment_id)
    assert rows.count() == 1
    assert XSS in rows.first.inner_text()  # the payload is shown as text, never run
    shot(page, "experiments")
    rows.first.click()
    page.wait_for_selector("[data-testid=summary]")
    for chart in ("chart-history", "chart-parallel", "chart-curves", "chart-timeline", "chart-importance"):
        assert canvas_drawn(page, f"[data-testid={chart}]"), chart
    assert page.locator("[data-testid=best-metric]").inner_text() != "–"
    assert page.evaluate("window.__xss") is None and not page.locator("img[src=x]").count()
    shot(page, "experiment")
    assert not page.errors, page.errors


def test_trial_table_sort_filter_select_compare_and_csv(browser, ui: UiSetup, tmp_path):
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={ui.experiment_id}&tab=trials")
    page.wait_for_selector("[data-testid=trial-row]", timeout=30000)
    assert page.locator("[data-testid=trial-row]").count() == 8
    page.click("[data-sort=metric]")  # first click on the metric: best first
    page.wait_for_function("document.querySelector('[data-testid=trial-row]').dataset.index !== '0' || true")
    time.sleep(1)
    metrics = [m for m in page.locator("[data-testid=metric]").all_inner_texts()]
    numbers = [float(m) for m in metrics if m]
    assert numbers == sorted(numbers, reverse=True) and metrics[-1] == ""
    page.click("[data-testid=filter-FAILED]")
    page.wait_for_function("document.querySelectorAll('[data-testid=trial-row]').length === 1", timeout=15000)
    assert page.locator("[data-testid=trial-row]").first.get_attribute("data-index") == "3"
    page.click("[data-testid=filter-FAILED]")
    page.wait_for_function("document.querySelectorAll('[data-testid=trial-row]').length === 8", timeout=15000)
    page.fill("[data-testid=trial-search]", "adam")
    page.wait_for_function("document.querySelectorAll('[data-testid=trial-row]').length < 8", timeout=15000)
    page.fill("[data-testid=trial-search]", "")
    page.wait_for_function("document.querySelectorAll('[data-testid=trial-row]').length === 8", timeout=15000)
    shot(page, "trials")
    for index in (0, 1, 2):
        page.check(f"input[aria-label='compare trial {index}']")
    page.click("[data-testid=compare-button]")
    page.wait_for_selector("[data-testid=compare]")
    assert canvas_drawn(page, "[data-testid=compare]")
    assert "trial 0" in page.locator("[data-testid=compare]").inner_text()
    shot(page, "compare")
    with page.expect_download() as download:
        page.click("[data-testid=export-csv]")
    saved = tmp_path / "trials.csv"
    download.value.save_as(saved)
    import csv

    rows = list(csv.reader(saved.open(newline="")))
    assert rows[0][:3] == ["trial_index", "trial_id", "status"] and len(rows) == 9
    assert not page.errors, page.errors


def test_trial_page_from_the_task_extra_link(browser, ui: UiSetup):
    page = login(browser, ui)
    links = ui.harness.airflow.api(
        "GET", f"/dags/{ui.dag_id}/dagRuns/{ui.run_id}/taskInstances/trial/links", params={"map_index": 2}
    ).json()["extra_links"]
    page.goto(ui.base + links["Trial"])
    page.wait_for_selector("[data-testid=trial-page]", timeout=30000)
    assert (
        "Trial 2"
        in page.locator(
            "[data-testid=trial-page] h2, [data-testid=trial-page] h3, [data-testid=trial-page]"
        ).first.inner_text()
    )
    assert canvas_drawn(page, "[data-testid=trial-page]")
    assert page.locator("[data-testid=log-stdout]").count() == 1
    assert page.locator("[data-testid=link-Platform]").get_attribute("href").startswith("https://platform.example/")
    # every point, downloaded with the page's session: what the curve was drawn from
    with page.expect_download() as download:
        page.click("[data-testid=intermediate-csv]")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0] == "step,value" and len(lines) == 1 + 6
    shot(page, "trial")
    page.click("[data-testid=link-Task\\ instance]")
    page.wait_for_url(lambda url: "/tasks/trial/mapped/2" in url, timeout=15000)
    assert not page.errors, page.errors


def test_dark_theme_applies(browser, ui: UiSetup):
    page = login(browser, ui, dark=True)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={ui.experiment_id}")
    page.wait_for_selector("[data-testid=summary]", timeout=30000)
    assert page.evaluate("document.documentElement.classList.contains('dark')")
    # the panel's colour as RGB, whatever CSS colour space Chakra wrote it in (oklch here)
    channels = page.eval_on_selector(
        "[data-testid=summary]",
        """e => {
        const c = document.createElement('canvas').getContext('2d');
        c.fillStyle = getComputedStyle(e).backgroundColor; c.fillRect(0, 0, 1, 1);
        return Array.from(c.getImageData(0, 0, 1, 1).data).slice(0, 3); }""",
    )
    assert sum(channels) < 3 * 80, channels  # a dark panel, not a light one
    assert canvas_drawn(page, "[data-testid=chart-history]")
    shot(page, "experiment-dark")


def test_the_dag_run_tab_shows_its_experiment(browser, ui: UiSetup):
    page = login(browser, ui)
    page.goto(f"{ui.base}/dags/{ui.dag_id}/runs/{ui.run_id}/plugin/trialflow-run")
    page.wait_for_selector("[data-testid=summary]", timeout=30000)
    assert ui.experiment_id in page.locator("[data-testid=experiment-page]").inner_text()
    # the heading sat ~8 px under the run's tab bar, its top cut off
    tabs = (
        page.get_by_role("link", name="Task Instances").bounding_box()
        or page.get_by_text("Task Instances").first.bounding_box()
    )
    heading = page.locator("[data-testid=experiment-name]").bounding_box()
    assert tabs is not None and heading is not None
    assert heading["y"] >= tabs["y"] + tabs["height"] + 4, (heading, tabs)
    best = page.locator("[data-testid=best-parameters]").inner_text()
    assert best.startswith(("lr = ", "opt = ", "act = ")) and "{" not in best  # not raw JSON
    shot(page, "dag-run-tab")


def test_what_a_name_says_is_what_shows_and_a_trial_without_results_says_so(browser, ui: UiSetup):
    """A name with a right-to-left override ('quotes' read as 'setouq') shows the control
    visibly in the list, the heading and the DAG run's tab; a trial that failed before any
    result says so instead of drawing empty axes; a handle's start time reads as a date."""
    from tests.helpers.airflow import PY

    dag_id, _ = ui.harness.experiment(
        "ui_rtl",
        f"""\
experimentName: "\\u202Equotes"
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {PY} fail.py
trialConcurrency: 1
maxTrialNumber: 1
tuner: {{name: Random}}
trainingService: {{platform: local}}
""",
        {"fail.py": "raise SystemExit('no data file')\n"},
    )
    run_id, _ = ui.harness.run(dag_id)
    from trialflow.platforms.base import experiment_id_for

    experiment = experiment_id_for(dag_id, run_id)
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow")
    page.wait_for_selector("[data-testid=experiment-row]", timeout=30000)
    assert "⟨U+202E⟩quotes" in page.locator("[data-testid=experiment-list]").inner_text()
    page.goto(f"{ui.base}/dags/{dag_id}/runs/{run_id}/plugin/trialflow-run")
    page.wait_for_selector("[data-testid=experiment-name]", timeout=30000)
    assert page.locator("[data-testid=experiment-name]").inner_text() == "⟨U+202E⟩quotes"
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment}&trial=0")
    page.wait_for_selector("[data-testid=trial-page]", timeout=30000)
    assert page.locator("[data-testid=no-intermediate]").inner_text() == "This trial reported no intermediate results."
    assert page.locator("[data-testid=trial-curve]").count() == 0
    assert "no data file" in page.locator("[data-testid=trial-message]").inner_text()
    started = page.locator("[data-testid=trial-page] td", has_text="started").locator("xpath=following-sibling::td")
    assert "(" in started.inner_text() and "/" in started.inner_text(), (
        started.inner_text()
    )  # a date, the number beside
    shot(page, "trial-failed")
    assert not page.errors, page.errors


def test_a_limited_user_and_an_anonymous_visit(browser, ui: UiSetup):
    page = login(browser, ui, user="limited")
    page.goto(f"{ui.base}/plugin/trialflow")
    page.wait_for_selector("[data-testid=experiment-row]", timeout=30000)
    assert ui.private_id not in page.locator("[data-testid=experiment-list]").inner_text()
    page.goto(f"{ui.base}/plugin/trialflow?experiment={ui.private_id}")
    page.wait_for_selector("[data-testid=error]", timeout=30000)
    assert "may not read" in page.locator("[data-testid=error]").inner_text()
    anonymous = browser.new_context().new_page()
    response = anonymous.goto(f"{ui.base}/trialflow/api/experiments")
    assert response.status == 401
    anonymous.goto(f"{ui.base}/plugin/trialflow")
    anonymous.wait_for_url(lambda url: "login" in url, timeout=30000)
    assert not anonymous.locator("[data-testid=experiment-row]").count()


def test_pages_work_under_a_path_prefix(browser, ui: UiSetup):
    """A second api-server on the same Airflow home, served under /airflow (``[api] base_url``)."""
    from trialflow.cli.embedded import free_port

    airflow = ui.harness.airflow
    port = free_port()
    env = {
        **airflow.env(),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}/airflow",
    }
    log = open(airflow.home / "logs" / "api-server-prefix.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow", "api-server", "--port", str(port), "--host", "127.0.0.1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        import httpx

        base = f"http://127.0.0.1:{port}/airflow"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/api/v2/monitor/health", timeout=3).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        prefixed = UiSetup(ui.harness, ui.dag_id, ui.run_id, ui.experiment_id, ui.private_id, ui.passwords)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.goto(f"{base}/auth/login/")
        page.fill("input[name=username]", "trialflow")
        page.fill("input[name=password]", prefixed.passwords["trialflow"])
        page.keyboard.press("Enter")
        page.wait_for_url(lambda url: "/auth/login" not in url, timeout=30000)
        page.goto(f"{base}/plugin/trialflow?experiment={ui.experiment_id}")
        page.wait_for_selector("[data-testid=summary]", timeout=30000)
        assert canvas_drawn(page, "[data-testid=chart-history]")
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def test_the_dag_tab_lists_its_runs_experiments(browser, ui: UiSetup):
    page = login(browser, ui)
    page.goto(f"{ui.base}/dags/{ui.dag_id}/plugin/trialflow-dag")
    page.wait_for_selector("[data-testid=experiment-row]", timeout=30000)
    text = page.locator("[data-testid=experiment-list]").inner_text()
    assert ui.experiment_id in text and ui.private_id not in text  # only this DAG's experiments


def test_a_running_experiment_refreshes_by_itself(browser, ui: UiSetup):
    """Trials finish while the page is open: counts and the table move without a reload."""
    from tests.helpers.airflow import PY

    slow = (
        "import time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "time.sleep(4)\ntrial.report_final_result(p['x'])\n"
    )
    dag_id, _ = ui.harness.experiment(
        "ui_live",
        f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {PY} slow.py
trialConcurrency: 2
maxTrialNumber: 6
tuner: {{name: Random}}
trainingService: {{platform: local}}
""",
        {"slow.py": slow},
    )
    ui.harness.airflow.wait_for_dag(dag_id, ui.harness.dag_files[dag_id], timeout=90)
    run_id = ui.harness.airflow.trigger(dag_id)
    from trialflow.platforms.base import experiment_id_for

    experiment = experiment_id_for(dag_id, run_id)
    deadline = time.monotonic() + 60
    while ui.get(f"experiments/{experiment}").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment}&tab=trials")
    page.wait_for_selector("[data-testid=trial-row]", timeout=30000)
    first = page.locator("[data-testid=summary]").inner_text()
    assert "refreshing every 5 s" in page.locator("[data-testid=experiment-page]").inner_text()
    navigations = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    # What the page must do is follow the run, however fast the shared scheduler is today: a
    # trial that ends while it is open shows up, without a reload (some may have ended already).
    succeeded_rows = (
        "Array.from(document.querySelectorAll('[data-testid=trial-row]'))"
        ".filter(r => r.innerText.includes('succeeded')).length"
    )
    before = page.evaluate(succeeded_rows)
    try:
        page.wait_for_function(f"n => {succeeded_rows} > n", arg=before, timeout=240000)
    except Exception:
        states = [(ti["map_index"], ti["state"]) for ti in ui.harness.tis(dag_id, run_id)]
        raise AssertionError(f"no trial ended on the page; the run's trial tasks: {states}") from None
    # The summary moves too (its own request: it may land a refresh after the table's).
    page.wait_for_function(
        "first => document.querySelector('[data-testid=summary]').innerText !== first", arg=first, timeout=30000
    )
    assert not navigations, "the page reloaded"
    ui.harness.wait(dag_id, run_id, timeout=300)
    # The run's end reaches the page too: every trial shows, and it stops refreshing.
    page.wait_for_function("document.querySelectorAll('[data-testid=trial-row]').length === 6", timeout=30000)
    page.wait_for_function(
        "!document.querySelector('[data-testid=experiment-page]').innerText.includes('refreshing every')",
        timeout=30000,
    )
    assert not navigations, "the page reloaded"


def test_a_restarted_trial_says_when_and_from_which_checkpoint(browser, ui: UiSetup):
    """A trial whose process was SIGKILLed after its second checkpoint (as the OOM killer
    would) ran again from it: its page says so, with the step and the fault."""
    from tests.helpers.airflow import PY
    from trialflow.platforms.base import experiment_id_for

    trial = (
        "import json, os, signal\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "resume = trial.last_checkpoint()\n"
        "start = json.load(open(os.path.join(resume, 's.json')))['e'] if resume else 0\n"
        "for e in range(start, 4):\n    trial.report_intermediate_result(e * p['x'])\n"
        "    with trial.checkpoint() as f:\n        json.dump({'e': e + 1}, open(os.path.join(f, 's.json'), 'w'))\n"
        "    if e == 1 and not resume:\n        os.kill(os.getpid(), signal.SIGKILL)\n"
        "trial.report_final_result(p['x'])\n"
    )
    dag_id, _ = ui.harness.experiment(
        "ui_restart",
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {PY} t.py\ntrialConcurrency: 1\n"
        "maxTrialNumber: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\ncheckpoints: {restarts: 2}\n",
        {"t.py": trial},
    )
    run_id, state = ui.harness.run(dag_id)
    assert state == "success"
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment_id_for(dag_id, run_id)}&trial=0")
    page.wait_for_selector("[data-testid=trial-restarts]", timeout=30000)
    said = page.locator("[data-testid=trial-restarts]").inner_text()
    assert "Restarted once after a fault" in said, said
    restart = page.locator("[data-testid=trial-restart-1]").inner_text()
    assert "start 2 from the checkpoint at step 2" in restart and "exited with code 137" in restart, restart
    shot(page, "trial-restarted")
    assert not page.errors, page.errors


def test_a_pbt_trial_shows_its_parent_and_the_experiment_its_generations(browser, ui: UiSetup):
    """Population Based Training, two generations of two, with a trial written like NNI's
    mnist-pbt one: a second-generation trial's page says which trial's checkpoint it started
    from (a link to it) and whether it copied its parameters; the experiment's page shows each
    generation's progress."""
    from tests.helpers.airflow import PY
    from trialflow.platforms.base import experiment_id_for

    trial = (
        "import json, os, nni\np = nni.get_next_parameter()\n"
        "load = os.path.join(p['load_checkpoint_dir'], 'w.json')\n"
        "w = json.load(open(load))['w'] if os.path.isfile(load) else 0.0\n"
        "w += p['x']\nnni.report_final_result(w)\nos.makedirs(p['save_checkpoint_dir'], exist_ok=True)\n"
        "json.dump({'w': w}, open(os.path.join(p['save_checkpoint_dir'], 'w.json'), 'w'))\n"
    )
    dag_id, _ = ui.harness.experiment(
        "ui_pbt",
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {PY} t.py\ntrialConcurrency: 2\n"
        "maxTrialNumber: 4\ntuner: {name: PBTTuner, classArgs: {population_size: 2, fraction: 0.5}}\n"
        "trainingService: {platform: local}\n",
        {"t.py": trial},
    )
    run_id, state = ui.harness.run(dag_id)
    assert state == "success"
    experiment = experiment_id_for(dag_id, run_id)
    rows = {r.trial_index: r for r in ui.harness.rows(dag_id, run_id)}
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment}")
    page.wait_for_selector("[data-testid=population]", timeout=30000)
    said = page.locator("[data-testid=population]").inner_text()
    assert "2 trials a generation, 2 generations" in said, said
    assert "gen 0: 2/2" in said and "gen 1: 2/2" in said, said
    shot(page, "experiment-population")
    # fraction 0.5 of 2: the worse of generation 0 copies the better; the better goes on
    better = max((0, 1), key=lambda i: rows[i].final_metric)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment}&trial=3")
    page.wait_for_selector("[data-testid=trial-lineage]", timeout=30000)
    lineage = page.locator("[data-testid=trial-lineage]").inner_text()
    assert "generation 1, member 1" in lineage, lineage
    assert "started from its checkpoint at step 0" in lineage, lineage
    copied = 1 != better
    assert ("took trial" in lineage) == copied and ("Went on from its own line" in lineage) == (not copied), lineage
    assert f"trial {better if copied else 1}" in lineage, lineage
    shot(page, "trial-lineage")
    page.locator("[data-testid=trial-parent]").click()
    page.locator("[data-testid=trial-lineage]", has_text="First generation").wait_for(timeout=30000)
    assert f"&trial={better if copied else 1}" in page.url, page.url
    assert not page.errors, page.errors


def test_a_trials_artifacts_are_listed_and_downloaded_by_its_dags_readers_only(browser, ui: UiSetup):
    """The model an ended trial wrote in its artifacts folder is listed on its page with its
    size and comes back byte for byte; a name outside the trial's artifacts (another trial's,
    a climb out, an absolute path) is a 404, an over-long name a 422, and a user who may not
    read the DAG gets a 403 and nothing."""
    from tests.helpers.airflow import PY
    from trialflow.platforms.base import experiment_id_for

    trial = (
        "import os\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "folder = trial.artifacts_folder()\nos.makedirs(os.path.join(folder, 'plots'), exist_ok=True)\n"
        "open(os.path.join(folder, 'model.bin'), 'wb').write(bytes(range(256)) * 40)\n"
        "open(os.path.join(folder, 'plots', 'loss é.svg'), 'w').write('<svg/>')\n"
        "trial.report_final_result(p['x'])\n"
    )
    dag_id, _ = ui.harness.experiment(
        "ui_private_artifacts",
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {PY} t.py\ntrialConcurrency: 2\n"
        "maxTrialNumber: 2\ntuner: {name: Random}\ntrainingService: {platform: local}\ncheckpoints: {}\n",
        {"t.py": trial},
    )
    run_id, state = ui.harness.run(dag_id)
    assert state == "success"
    experiment = experiment_id_for(dag_id, run_id)
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment}&trial=0")
    page.wait_for_selector("[data-testid=trial-artifacts]", timeout=30000)
    listed = page.locator("[data-testid=trial-artifacts]").inner_text()
    assert "Artifacts (2)" in listed and "model.bin" in listed and "10.0 KiB" in listed and "loss é.svg" in listed
    shot(page, "trial-artifacts")
    with page.expect_download() as download:
        page.locator("[data-testid='artifact-model.bin']").click()
    assert Path(download.value.path()).read_bytes() == bytes(range(256)) * 40
    api = f"{ui.base}/trialflow/api/experiments/{experiment}/trials"
    assert page.request.get(f"{api}/0/artifacts/plots/loss%20%C3%A9.svg").body() == b"<svg/>"
    for outside in ("../1/artifacts/model.bin", "..%2F..%2Fconfig.yml", "%2Fetc%2Fhostname", "plots", "model.bin/x"):
        response = page.request.get(f"{api}/0/artifacts/{outside}")
        assert response.status == 404, (outside, response.status, response.text()[:200])
    assert page.request.get(f"{api}/0/artifacts/{'a' * 2000}").status == 422
    assert page.request.get(f"{api}/99/artifacts/model.bin").status == 404
    assert not page.errors, page.errors
    limited = login(browser, ui, user="limited")
    refused = limited.request.get(f"{api}/0/artifacts/model.bin")
    assert refused.status == 403 and b"\x00\x01" not in refused.body()
    # Another writer put a manifest naming a path outside into the store: the download is a 502
    # saying so, the page says it in words, nothing is read through it.
    store = ui.harness.store.experiment_attr(experiment, "artifacts")["url"].removeprefix("file://")
    trial_id = page.request.get(f"{api}/0").json()["trial_id"]
    manifest = Path(store) / experiment / trial_id / "artifacts.manifest.json"
    manifest.write_text('{"files": [{"name": "../../../config.yml", "size": 1, "sha256": "x"}]}')
    bad = page.request.get(f"{api}/0/artifacts/model.bin")
    assert bad.status == 502 and "leads outside it" in bad.json()["detail"], bad.text()
    assert "leads outside it" in page.request.get(f"{api}/0").json()["artifacts_error"]
    page.reload()
    page.wait_for_selector("[data-testid=artifacts-error]", timeout=30000)
    assert "could not be read" in page.locator("[data-testid=artifacts-error]").inner_text()


def test_a_long_pbt_experiment_shows_its_newest_generations_in_both_themes(browser, ui: UiSetup):
    """300 trials of a population of 10 under a 150-character name: the summary shows the newest
    12 generations and says how many came before, instead of 30 chips; light and dark."""
    from trialflow.config.model import AlgorithmConfig
    from trialflow.config.search_space import parse_search_space
    from trialflow.platforms.base import TrialStatus
    from trialflow.trial.protocol import Metric
    from trialflow.tuning.asker import ask

    store = ui.harness.store
    experiment = "epbt-long-ui"
    store.open_experiment(experiment)
    tuner = {"name": "PBTTuner", "classArgs": {"population_size": 10}}
    store.set_experiment_attrs(
        experiment,
        {
            "dag_id": ui.dag_id,
            "experiment_name": "population based training of a very long name " * 3 + "end",
            "config": {"tuner": tuner, "maxTrialNumber": 300, "trainingService": {"platform": "local"}},
        },
    )
    algorithm = AlgorithmConfig.model_validate(tuner)
    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    for index in range(300):
        asked = ask(store, experiment, index, f"{experiment}-{index:04d}", algorithm, space)
        if index < 295:  # the last generation is half ended
            store.record_metrics(asked.storage_id, [Metric("FINAL", 0, index / 300)])
            store.close(asked.storage_id, TrialStatus.SUCCEEDED, None)
    for dark in (False, True):
        page = login(browser, ui, dark=dark)
        page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment}")
        page.wait_for_selector("[data-testid=population]", timeout=30000)
        said = page.locator("[data-testid=population]").inner_text()
        assert "10 trials a generation, 30 generations: generation 29 has 5 of 10 ended" in said, said
        assert page.locator("[data-testid^=generation-]").count() == 12
        assert "18 earlier generations" in page.locator("[data-testid=generations-earlier]").inner_text()
        assert page.locator("[data-testid=generation-29]").inner_text() == "gen 29: 5/10"
        shot(page, "experiment-population-long-dark" if dark else "experiment-population-long")
        assert not page.errors, page.errors


def test_a_tracked_experiment_links_to_its_mlflow_runs(browser, ui: UiSetup, mlflow_server):
    """An experiment tracked in MLflow (a real ``mlflow server``): its page links to its run,
    each trial row and the trial's page to its nested run; MLflow's own UI shows the trials as
    nested runs of the experiment's (the README's screenshot)."""
    import uuid

    from tests.helpers.airflow import PY
    from tests.helpers.mlflow_server import CONN_ID
    from trialflow.platforms.base import experiment_id_for

    name = f"digits-{uuid.uuid4().hex[:6]}"
    trial = (
        "from trialflow import trial\np = trial.get_next_parameter()\n"
        "for s in range(5):\n    trial.report_intermediate_result(p['C'] * (s + 1) / 5)\n"
        "trial.report_final_result(p['C'])\n"
    )
    dag_id, _ = ui.harness.experiment(
        "ui_mlflow",
        "experimentName: digits-svc\nsearchSpace: {C: {_type: uniform, _value: [0.5, 1]}}\n"
        f"trialCommand: {PY} t.py\n"
        "trialConcurrency: 2\nmaxTrialNumber: 4\ntuner: {name: Random, classArgs: {seed: 1}}\n"
        f"trainingService: {{platform: local}}\nmlflow: {{connId: {CONN_ID}, experimentName: {name}}}\n",
        {"t.py": trial},
    )
    run_id, state = ui.harness.run(dag_id)
    assert state == "success"
    experiment = experiment_id_for(dag_id, run_id)
    client = mlflow_server.client()
    mlflow_id = client.get_experiment_by_name(name).experiment_id
    runs = client.search_runs([mlflow_id])
    by_key = {r.data.tags.get("trialflow.trial_index", "experiment"): r.info.run_id for r in runs}
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment}")
    page.wait_for_selector("[data-testid=mlflow-run]", timeout=30000)
    assert page.locator("[data-testid=mlflow-run]").get_attribute("href") == (
        f"{mlflow_server.url}/#/experiments/{mlflow_id}/runs/{by_key['experiment']}"
    )
    shot(page, "experiment-mlflow")
    # results that stop reaching MLflow (here: its connection missing where a step ran) are said
    # on the page, with why, until a pass reaches the server again (issue 64, 2)
    from trialflow.tracking.sync import AWAY_ATTR, say_away

    store = ui.harness.store
    say_away(store, experiment, "mlflow.connId 'gone_conn' is not defined", "MLflow not reached")
    page.reload()
    away = page.locator("[data-testid=mlflow-away]")
    away.wait_for(timeout=30000)
    assert "results have not reached MLflow since" in away.inner_text()
    assert "(mlflow.connId 'gone_conn' is not defined)" in away.inner_text()
    shot(page, "experiment-mlflow-not-reached")
    store.set_experiment_attrs(experiment, {AWAY_ATTR: None})
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment}&tab=trials")
    page.wait_for_selector("[data-testid=mlflow-link]", timeout=30000)
    links = page.locator("[data-testid=mlflow-link]")
    assert links.count() == 4
    hrefs = [links.nth(i).get_attribute("href") for i in range(4)]
    assert hrefs == [f"{mlflow_server.url}/#/experiments/{mlflow_id}/runs/{by_key[str(i)]}" for i in range(4)]
    shot(page, "trials-mlflow")
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment}&trial=2")
    page.wait_for_selector("[data-testid=link-MLflow]", timeout=30000)
    assert page.locator("[data-testid=link-MLflow]").get_attribute("href") == hrefs[2]
    assert not page.errors, page.errors
    # MLflow's own UI: the experiment's run with its four trials nested under it
    mlflow_page = browser.new_page(viewport={"width": 1400, "height": 800})
    mlflow_page.goto(f"{mlflow_server.url}/#/experiments/{mlflow_id}/runs")
    parent = mlflow_page.locator("[role=row]", has_text="digits-svc").first
    parent.wait_for(timeout=60000)
    assistant = mlflow_page.locator("button[aria-label=Close]")
    if assistant.count():  # MLflow 3's assistant panel, open on a first visit
        assistant.first.click()
    parent.locator("button[data-component-id*=runnamecellrenderer]").first.click()  # its nested runs
    mlflow_page.get_by_text("trial 3").first.wait_for(timeout=30000)
    shot(mlflow_page, "mlflow-nested-runs")
    mlflow_page.close()
