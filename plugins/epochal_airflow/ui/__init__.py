"""The Checkpoints view: a FastAPI app (HTML pages + JSON REST API, ``ui.app``) mounted by the Airflow
plugin in ``plugins/epochal_checkpoints_plugin.py`` through a :class:`~epochal_airflow.ui.lazy.LazyASGIApp`.
Every number comes from the job's storage root through :class:`state_store.monitoring.CheckpointStats`;
nothing is read from the Airflow database. Importing this package imports neither FastAPI nor Airflow.
"""

URL_PREFIX = "/epochal"
