"""Experiment pages at scale: 2,000 trials x 100 intermediate results (200,000 rows).

Prints, side by side:

* each data endpoint's server-side time (median of 5), in process (the query alone) and over
  HTTP from a real Airflow api-server with the plugin (login, auth manager and JSON included);
* how long the experiment page takes in headless Chromium until its charts are drawn;
* optuna-dashboard on the same store (its own server, installed in .bench/dashboard-venv): the
  time of the one API call its study page makes before drawing anything.

With ``--big N`` one trial has N intermediate results (its page: first call, then again);
with ``--source <checkout>`` the in-process column is timed for that checkout too, side by side
(its queries on the same store, in a process of its own). The exports: time to the first byte and
to the last over HTTP, and the Python memory peak of writing all of it (streamed, against the
whole document held, as before).

    python bench/ui.py [--trials 2000] [--steps 100] [--big 0] [--source DIR] [--no-browser] [--no-dashboard]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if os.environ.get("TRIALFLOW_BENCH_SOURCE"):  # --source: this process times another checkout's queries
    sys.path.insert(0, os.environ["TRIALFLOW_BENCH_SOURCE"])

import httpx  # noqa: E402
import optuna  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from bench.seed import bulk_add  # noqa: E402
from trialflow import queries  # noqa: E402
from trialflow.cli.embedded import free_port  # noqa: E402
from trialflow.cli.runner import embedded_airflow  # noqa: E402
from trialflow.store.experiment_store import ExperimentStore, sqlite_url  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
BENCH = ROOT / ".bench" / "ui"
EXPERIMENT = "ebench001"
TARGET_MS = 300.0
BIG_TRIAL = 1234  # the trial whose page the bench opens
SPACE = {
    "lr": {"_type": "loguniform", "_value": [1e-4, 1e-1]},
    "batch": {"_type": "choice", "_value": [16, 32, 64, 128]},
    "opt": {
        "_type": "choice",
        "_value": [{"_name": "sgd", "momentum": {"_type": "uniform", "_value": [0, 0.99]}}, {"_name": "adam"}],
    },
    "dropout": {"_type": "uniform", "_value": [0, 0.5]},
}


def seed_store(home: Path, trials: int, steps: int, big: int = 0, others: int = 0) -> str:
    """A store as trialflow writes it, filled in bulk (bench/seed.py, checked against Optuna's own
    writes); with ``big``, trial ``BIG_TRIAL`` has that many intermediate results; ``others``
    more experiments of 60 trials each sit beside it (the list's load). Its URL."""
    db = home / "experiments.db"
    url = sqlite_url(db)
    if db.exists():
        return url
    home.mkdir(parents=True, exist_ok=True)
    store = ExperimentStore(url)
    study = optuna.create_study(storage=store.storage, study_name=EXPERIMENT, direction="maximize")
    for key, value in {
        # long on purpose: the screenshot (experiment-<trials>.png) shows how a team's real names lay out
        "experiment_name": "resnet50-imagenet-lr-and-weight-decay-sweep-with-cosine-schedule-2026-11-nightly "
        f"({trials} trials)",
        "dag_id": "bench_ui",
        "run_id": "bench_run",
        "platform": "local",
        "optimize_mode": "maximize",
        "config": {
            "searchSpace": SPACE,
            "tuner": {"name": "TPE"},
            "maxTrialNumber": trials,
            "trialConcurrency": 8,
            "trainingService": {"platform": "local"},
        },
        "run:bench_run": {"first_index": 0, "count": trials, "deadline": None},
    }.items():
        study.set_user_attr(key, value)
    rng = random.Random(1)
    # every trial in the past (a trial a second): an end in the future is one a page must re-read
    start = datetime.now() - timedelta(seconds=trials + 6 * 3600)
    batch: list[optuna.trial.FrozenTrial] = []
    for index in range(trials):
        opt = rng.choice(["sgd", "adam"])
        params = {
            "lr": 10 ** rng.uniform(-4, -1),
            "batch": rng.choice([16, 32, 64, 128]),
            "opt": {"_name": opt, **({"momentum": rng.uniform(0, 0.99)} if opt == "sgd" else {})},
            "dropout": rng.uniform(0, 0.5),
        }
        quality = 1 - abs(params["lr"] - 0.01) * 5 - params["dropout"] * 0.2
        status = rng.choices(["SUCCEEDED", "FAILED", "EARLY_STOPPED"], [0.85, 0.05, 0.10])[0]
        length = big if index == BIG_TRIAL and big else steps
        curve = {s: quality * (1 - 0.9 ** (s + 1)) + rng.gauss(0, 0.01) for s in range(length)}
        if length > steps:
            curve[length // 3] = quality + 5.0  # one spike: the downsampled curve must still show it
        begun = start + timedelta(seconds=index)
        trial = optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE
            if status == "SUCCEEDED"
            else optuna.trial.TrialState.PRUNED
            if status == "EARLY_STOPPED"
            else optuna.trial.TrialState.FAIL,
            value=curve[length - 1] if status == "SUCCEEDED" else None,
            intermediate_values=curve,
            user_attrs={
                "trial_index": index,
                "trial_id": f"{EXPERIMENT}-{index:04d}",
                "parameters": params,
                "nni_status": status,
                "final_metric": curve[length - 1] if status == "SUCCEEDED" else None,
                "handle": {"platform": "local", "trial_dir": f"/nowhere/{index}"},
                "service_index": 0,
            },
        )
        trial.datetime_start, trial.datetime_complete = begun, begun + timedelta(seconds=rng.uniform(30, 90))
        batch.append(trial)
        if len(batch) == 1000:
            bulk_add(store, EXPERIMENT, batch)
            batch = []
    bulk_add(store, EXPERIMENT, batch)
    for j in range(others):  # the other experiments of a store that has run for months
        name = f"eother{j:04d}"
        other = optuna.create_study(storage=store.storage, study_name=name, direction="maximize")
        for key, value in {
            "experiment_name": f"nightly sweep {j}",
            "dag_id": f"bench_ui_{j % 40}",
            "run_id": f"run_{j}",
            "platform": "local",
            "optimize_mode": "maximize",
            "config": {"searchSpace": SPACE, "tuner": {"name": "Random"}, "maxTrialNumber": 60},
        }.items():
            other.set_user_attr(key, value)
        bulk_add(
            store,
            name,
            [
                optuna.trial.create_trial(
                    value=i / 60,
                    intermediate_values={s: i / 60 for s in range(10)},
                    user_attrs={"trial_index": i, "trial_id": f"{name}-{i:04d}", "nni_status": "SUCCEEDED"},
                )
                for i in range(60)
            ],
        )
    return url


#: One HTTP client for the run, kept alive as a browser keeps its connection: a new httpx client
#: per call built an SSL context each time (~50 ms of every figure before 2026-11-28, client side).
_CLIENT: httpx.Client | None = None


def get_ok(url: str, params: dict[str, Any], headers: dict[str, str]) -> None:
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = httpx.Client(timeout=60)
    _CLIENT.get(url, params=params, headers=headers).raise_for_status()


def median_ms(call: Callable[[], Any], repeat: int = 5) -> float:
    call()  # warm: connections, caches that a running api-server has too
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def endpoints(engine: Any) -> dict[str, Callable[[], Any]]:
    return {
        "experiments (list)": lambda: queries.list_experiments(engine),
        "experiment (summary)": lambda: queries.experiment_summary(engine, EXPERIMENT),
        "trials page, by index": lambda: queries.trials_page(engine, EXPERIMENT, limit=25),
        "trials page, by metric": lambda: queries.trials_page(
            engine, EXPERIMENT, sort="metric", descending=True, limit=25
        ),
        "trials page, by parameter": lambda: queries.trials_page(
            engine, EXPERIMENT, sort="param:lr", limit=25, offset=1000
        ),
        "trials page, status + search": lambda: queries.trials_page(
            engine, EXPERIMENT, statuses=["SUCCEEDED"], search="adam", limit=25
        ),
        "chart data (sampled past 1,000)": lambda: queries.chart_data(engine, EXPERIMENT),
        "curves (best 20 + stopped)": lambda: queries.curves(engine, EXPERIMENT),
        "trial detail": lambda: queries.trial_detail(engine, EXPERIMENT, 1235),
        "trial detail, the big trial": lambda: queries.trial_detail(engine, EXPERIMENT, BIG_TRIAL),
        "importance (cached)": lambda: queries.importance(engine, EXPERIMENT),
        "export CSV (all trials)": lambda: queries.export_csv(engine, EXPERIMENT),
    }


HTTP_PATHS = {
    "experiments (list)": ("experiments", {}),
    "experiment (summary)": (f"experiments/{EXPERIMENT}", {}),
    "trials page, by index": (f"experiments/{EXPERIMENT}/trials", {"limit": 25}),
    "trials page, by metric": (f"experiments/{EXPERIMENT}/trials", {"limit": 25, "sort": "metric", "desc": "true"}),
    "trials page, by parameter": (
        f"experiments/{EXPERIMENT}/trials",
        {"limit": 25, "sort": "param:lr", "offset": 1000},
    ),
    "trials page, status + search": (
        f"experiments/{EXPERIMENT}/trials",
        {"limit": 25, "status": "SUCCEEDED", "search": "adam"},
    ),
    "chart data (sampled past 1,000)": (f"experiments/{EXPERIMENT}/chart", {}),
    "curves (best 20 + stopped)": (f"experiments/{EXPERIMENT}/curves", {}),
    "trial detail": (f"experiments/{EXPERIMENT}/trials/1235", {}),
    "trial detail, the big trial": (f"experiments/{EXPERIMENT}/trials/{BIG_TRIAL}", {}),
    "importance (cached)": (f"experiments/{EXPERIMENT}/importance", {}),
    "export CSV (all trials)": (f"experiments/{EXPERIMENT}/export.csv", {}),
}


def page_seconds(base: str, password: str, trials: int) -> float:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("TRIALFLOW_CHROMIUM", "/usr/bin/chromium"),
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(f"{base}/auth/login/")
        page.fill("input[name=username]", "trialflow")
        page.fill("input[name=password]", password)
        page.keyboard.press("Enter")
        page.wait_for_url(lambda url: "/auth/login" not in url, timeout=30000)
        times = []
        for _ in range(3):
            began = time.perf_counter()
            page.goto(f"{base}/plugin/trialflow?experiment={EXPERIMENT}")
            # Every chart's rendering finished (ECharts' "finished" event, after its progressive
            # frames: 20,000 lines are drawn a slice per frame) and its canvas holds the drawing.
            page.wait_for_function(
                """() => ['chart-history', 'chart-parallel', 'chart-curves', 'chart-timeline']
                .every(id => { const box = document.querySelector(`[data-testid=${id}] [data-drawn]`);
                  if (!box) return false;  // the chart's own box says each render that finished
                  let n = 0;  // every canvas of the chart: ECharts may draw on several layers
                  for (const c of box.querySelectorAll('canvas')) {
                    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                    for (let i = 3; i < d.length; i += 16) if (d[i] > 0) n++; }
                  return n > 500; })""",
                timeout=60000,
                polling=50,
            )
            times.append(time.perf_counter() - began)
        finished = page.evaluate(
            """() => Object.fromEntries(['chart-history', 'chart-parallel', 'chart-curves', 'chart-timeline'].map(
                id => [id, Number(document.querySelector(`[data-testid=${id}] [data-drawn]`).dataset.drawnAt)]))"""
        )
        print("last load, each chart's last render finished (ms after navigation):", finished)
        fetched = page.evaluate(
            """() => Object.fromEntries(performance.getEntriesByType('resource')
                .filter(e => /trialflow\\/api\\/experiments\\/[^/]+(\\/(chart|curves))?(\\?|$)/.test(e.name)
                  || /trialflow\\/static\\/trialflow\\.js/.test(e.name))
                .map(e => [e.name.replace(/^.*trialflow\\//, ''),
                           [Math.round(e.startTime), Math.round(e.responseEnd)]]))"""
        )
        print("last load, trialflow's requests (ms after navigation: started, answered):", fetched)
        page.screenshot(path=str(BENCH / f"experiment-{trials}.png"), full_page=True)
        browser.close()
    return statistics.median(times)


def dashboard_seconds(url: str) -> float | None:
    """optuna-dashboard's study page loads /api/studies/{id} (every trial with its intermediate
    values) before it draws; its own venv keeps it apart from trialflow's environment."""
    venv = ROOT / ".bench" / "dashboard-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        subprocess.run([uv, "pip", "install", "-q", "--python", str(python), "optuna-dashboard", "optuna"], check=True)
    port = free_port()
    proc = subprocess.Popen(
        [str(venv / "bin" / "optuna-dashboard"), url, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                studies = httpx.get(f"{base}/api/studies", timeout=5).json()["study_summaries"]
                break
            except (httpx.HTTPError, ValueError, KeyError):
                time.sleep(0.5)
        else:
            return None
        study_id = next(s["study_id"] for s in studies if s["study_name"] == EXPERIMENT)
        return median_ms(lambda: httpx.get(f"{base}/api/studies/{study_id}", timeout=120).raise_for_status(), 3) / 1000
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def in_process(url: str, big: int) -> dict[str, Any]:
    """Each endpoint's query in this process (medians of 5 after a warm call), the big trial's
    first call (nothing kept yet), and the export's Python memory peak."""
    import tracemalloc

    engine = ExperimentStore(url).storage.engine
    out: dict[str, Any] = {}
    if big:
        began = time.perf_counter()
        queries.trial_detail(engine, EXPERIMENT, BIG_TRIAL)
        out["big trial, first call"] = (time.perf_counter() - began) * 1000
    out.update({name: median_ms(call) for name, call in endpoints(engine).items()})
    for name, whole in (("export CSV", queries.export_csv), ("export JSON", queries.export_json)):
        tracemalloc.start()
        whole(engine, EXPERIMENT)
        out[f"{name}, memory peak (whole)"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    streams = {"export CSV": getattr(queries, "iter_csv", None), "export JSON": getattr(queries, "iter_json", None)}
    for name, stream in streams.items():
        if stream is None:
            continue  # a checkout from before the exports streamed
        tracemalloc.start()
        for _ in stream(engine, EXPERIMENT):
            pass
        out[f"{name}, memory peak (streamed)"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return out


def baseline_in_process(source: str, url: str, big: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--in-process-only", url, "--big", str(big)],
        env={**os.environ, "TRIALFLOW_BENCH_SOURCE": source},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def http_export(url: str, headers: dict[str, str]) -> tuple[float, float, int]:
    """(ms to the first byte, ms to the last, bytes) of one streamed download."""
    began = time.perf_counter()
    first = None
    size = 0
    with httpx.stream("GET", url, headers=headers, timeout=120) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            if first is None:
                first = time.perf_counter()
            size += len(chunk)
    ended = time.perf_counter()
    return ((first or ended) - began) * 1000, (ended - began) * 1000, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--big", type=int, default=0, help=f"trial {BIG_TRIAL} reports this many results")
    parser.add_argument("--others", type=int, default=0, help="other experiments in the store (60 trials each)")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--no-dashboard", action="store_true")
    parser.add_argument("--source", help="another checkout: its queries timed on the same store, side by side")
    parser.add_argument("--in-process-only", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_process_only:
        print(json.dumps(in_process(args.in_process_only, args.big)))
        return 0
    home = BENCH / (
        f"home-{args.trials}x{args.steps}"
        + (f"+{args.big}" if args.big else "")
        + (f"+e{args.others}" if args.others else "")
    )
    began = time.perf_counter()
    url = seed_store(home, args.trials, args.steps, args.big, args.others)
    engine = ExperimentStore(url).storage.engine
    with engine.connect() as conn:
        rows = conn.execute(sa.select(sa.func.count()).select_from(queries.INTERMEDIATE)).scalar()
    print(
        f"store: {args.trials} trials, {rows} intermediate results in all, {args.others} other experiments "
        f"({time.perf_counter() - began:.0f} s to seed)"
    )
    before = baseline_in_process(args.source, url, args.big) if args.source else {}
    direct = in_process(url, args.big)
    exports: dict[str, tuple[float, float, int]] = {}
    airflow = embedded_airflow(home)
    airflow.port = free_port()
    airflow.migrate()
    airflow.start(components=("api-server",))
    http: dict[str, float] = {}
    page = None
    try:
        airflow.wait_serving()
        password = json.loads((airflow.home / "passwords.json").read_text())["trialflow"]
        token = httpx.post(
            f"{airflow.base_url}/auth/token", json={"username": "trialflow", "password": password}, timeout=10
        ).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        for name, (path, params) in HTTP_PATHS.items():
            url = f"{airflow.base_url}/trialflow/api/{path}"
            http[name] = median_ms(partial(get_ok, url, params, headers))
        for kind in ("csv", "json"):
            download = f"{airflow.base_url}/trialflow/api/experiments/{EXPERIMENT}/export.{kind}"
            exports[kind] = http_export(download, headers)
        if not args.no_browser:
            page = page_seconds(airflow.base_url, password, args.trials)
    finally:
        airflow.stop()
    dashboard = None if args.no_dashboard else dashboard_seconds(url)
    side = f"{'before':>12}{'ratio':>8}" if before else ""
    print(f"\n{'endpoint':<36}{side} {'in process':>12} {'over HTTP':>12}  target {TARGET_MS:.0f} ms")
    for name, figure in direct.items():
        unit = "MB" if "memory" in name else "ms"
        was = ""
        if before:
            old_figure = before.get(name)
            was = f"{old_figure:>9.1f} {unit}{figure / old_figure:>8.2f}" if old_figure else f"{'-':>12}{'':>8}"
        over_http = f"{http[name]:>9.1f} ms" if name in http else f"{'':>12}"
        flag = ("ok" if http[name] < TARGET_MS else "OVER") if name in http else ""
        print(f"{name:<36}{was} {figure:>9.1f} {unit} {over_http}  {flag}")
    for kind, (first, last, size) in exports.items():
        print(
            f"export {kind.upper()} over HTTP, streamed: first byte {first:.0f} ms, last byte {last:.0f} ms, "
            f"{size / 2**20:.1f} MB"
        )
    if page is not None:
        print(f"\nexperiment page, charts drawn (headless Chromium, median of 3): {page:.2f} s  (target < 2 s)")
    if dashboard is not None:
        overview = (
            http["experiment (summary)"] + http["chart data (sampled past 1,000)"] + http["curves (best 20 + stopped)"]
        )
        print(
            f"optuna-dashboard /api/studies/<id> on the same store: {dashboard:.2f} s; trialflow's page data "
            f"(summary + chart + curves): {overview / 1000:.2f} s -> {dashboard / (overview / 1000):.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
