"""The Checkpoints view: a FastAPI app (HTML pages + JSON REST API) mounted by the Airflow plugin in
``plugins/epochal_checkpoints_plugin.py``. Every number comes from the job's storage root through
:class:`state_store.monitoring.CheckpointStats`; nothing is read from the Airflow database."""

from epochal_airflow.ui.app import URL_PREFIX, create_app

__all__ = ["URL_PREFIX", "create_app"]
