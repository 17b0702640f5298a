"""The experiment pages' data: a FastAPI app the plugin mounts on Airflow's api-server.

Three rooms: trialflow.ui.access (who may see and do what, the guards every route passes),
trialflow.ui.read_routes (what the pages show) and trialflow.ui.action_routes (what their buttons do). This
module assembles them with the page script and its icon. The store is read through
:mod:`trialflow.queries` (SQL, paginated); nothing here renders HTML.
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response

from trialflow.ui.action_routes import router as action_routes
from trialflow.ui.read_routes import router as read_routes

__all__ = ["app", "create_app"]

STATIC = Path(__file__).parent / "static"
BUNDLE = STATIC / "trialflow.js"


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Importance needs Optuna's evaluators and SciPy: ~1 s of imports, paid in the background at
    # start rather than by the first person who opens an experiment.
    threading.Thread(target=lambda: __import__("optuna.importance"), daemon=True, name="trialflow-warm").start()
    yield


def create_app() -> FastAPI:
    app = FastAPI(
        title="trialflow",
        description="trialflow experiment pages (data for the Airflow UI plugin)",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=_lifespan,
    )

    @app.get("/static/trialflow.js", include_in_schema=False)
    def bundle() -> Response:
        # The page script is public (it holds no data); every data route below needs a user.
        return FileResponse(BUNDLE, media_type="text/javascript", headers={"Cache-Control": "no-cache"})

    @app.get("/static/experiments.svg", include_in_schema=False)
    def icon() -> Response:
        return FileResponse(STATIC / "experiments.svg", media_type="image/svg+xml")

    app.include_router(read_routes)
    app.include_router(action_routes)
    return app


app = create_app() if os.environ.get("TRIALFLOW_NO_UI_APP") != "1" else None
