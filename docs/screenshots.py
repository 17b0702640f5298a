"""README's screenshots of the experiment pages, from a `trialflow run` home.

    python docs/screenshots.py [HOME]     # default: the `make demo` home

Starts that home's Airflow api-server alone (as `trialflow ui` does), logs in through Airflow's
form in headless Chromium (Debian's), and saves docs/images/*.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trialflow import queries  # noqa: E402
from trialflow.cli.runner import embedded_airflow  # noqa: E402
from trialflow.store.experiment_store import ExperimentStore, sqlite_url  # noqa: E402

OUT = ROOT / "docs" / "images"


def main() -> int:
    home = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "dags" / "experiments" / "digits" / ".trialflow").resolve()
    engine = ExperimentStore(sqlite_url(home / "experiments.db")).storage.engine
    experiment = queries.list_experiments(engine)[0].experiment_id
    best = queries.experiment_summary(engine, experiment)["best"]["trial_index"]
    airflow = embedded_airflow(home)
    airflow.start(components=("api-server",))
    try:
        airflow.wait_serving()
        password = json.loads((airflow.home / "passwords.json").read_text())["trialflow"]
        from playwright.sync_api import sync_playwright

        OUT.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            for dark in (False, True):
                page = browser.new_page(
                    viewport={"width": 1440, "height": 1000}, color_scheme="dark" if dark else "light"
                )
                page.goto(f"{airflow.base_url}/auth/login/")
                page.fill("input[name=username]", "trialflow")
                page.fill("input[name=password]", password)
                page.keyboard.press("Enter")
                page.wait_for_url(lambda url: "/auth/login" not in url)
                if dark:
                    page.evaluate("localStorage.setItem('theme', 'dark')")
                pages = (
                    {"experiment": f"?experiment={experiment}"}
                    if dark
                    else {
                        "experiments": "",
                        "experiment": f"?experiment={experiment}",
                        "trials": f"?experiment={experiment}&tab=trials",
                        "compare": f"?experiment={experiment}&tab=compare&compare=0,{best},2",
                        "trial": f"?experiment={experiment}&trial={best}",
                    }
                )
                for name, query in pages.items():
                    page.goto(f"{airflow.base_url}/plugin/trialflow{query}")
                    page.wait_for_timeout(3000)
                    page.screenshot(path=str(OUT / f"{name}{'-dark' if dark else ''}.png"), full_page=False)
            browser.close()
    finally:
        airflow.stop()
    print(f"screenshots in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
