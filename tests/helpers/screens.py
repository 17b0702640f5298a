"""What browser tests share about the page itself: screenshots (TRIALFLOW_SCREENSHOTS) and
whether a chart drew its data."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

SHOTS = os.environ.get("TRIALFLOW_SCREENSHOTS")


def shot(page: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def canvas_drawn(page: Any, selector: str, timeout: float = 20.0) -> bool:
    """True once the chart's canvas has enough non-transparent pixels (ECharts drew its data,
    not just an empty frame); waits while the data loads."""
    page.wait_for_selector(f"{selector} canvas", timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    while True:
        drawn = page.eval_on_selector_all(
            f"{selector} canvas",
            """cs => {
            let n = 0;  // every canvas of the chart: ECharts may draw on several layers
            for (const c of cs) { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
              for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; }
            return n; }""",
        )
        if drawn > 3000 or time.monotonic() > deadline:
            return drawn > 3000
        time.sleep(0.3)
