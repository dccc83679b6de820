"""The real-Airflow harness (``airflow dags test`` plus an ``airflow api-server``) of
tests/integration/airflow/test_restore_approval.py, for test_approval_misuse_airflow.py."""

from tests.integration.airflow.test_restore_approval import airflow

__all__ = ["airflow"]
