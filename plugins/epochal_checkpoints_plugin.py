"""Airflow plugin (Airflow >= 3.1 style, no Flask-AppBuilder): the Epochal Checkpoints view.

Registers the FastAPI app of :mod:`epochal_airflow.ui` under ``/epochal`` and a "Checkpoints" entry
in the Airflow UI's navigation (an external view: the page is shown inside the UI). Importing this
module does no I/O and imports neither FastAPI nor the API server (Airflow imports plugins in every
task process): the app is built, and the store opened, on the first request.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from epochal_airflow.ui import URL_PREFIX
from epochal_airflow.ui.lazy import LazyASGIApp


def _build() -> object:
    from epochal_airflow.ui.app import app_from_settings

    return app_from_settings()


class EpochalCheckpointsPlugin(AirflowPlugin):
    name = "epochal_checkpoints"
    fastapi_apps = [{"app": LazyASGIApp(_build), "url_prefix": URL_PREFIX, "name": "Epochal checkpoints"}]
    external_views = [
        {
            "name": "Checkpoints",
            "href": f"{URL_PREFIX}/checkpoints",
            "destination": "nav",
            "category": "browse",
            "url_route": "epochal-checkpoints",
        }
    ]
