"""One epoch-cycle DAG per configured Epochal job (see epochal_airflow.config for the settings)."""

from epochal_airflow.dag_factory import build_all

globals().update(build_all())
