"""Epochal for Airflow, shaped like an Airflow provider (as apache-airflow-providers-apache-spark):

* ``hooks/``     -- :class:`EpochalStoreHook`: an Airflow connection (Amazon provider's ``aws`` type,
  endpoint URL in the extras) -> an ObjectStore; credentials stay inside the hook.
* ``operators/`` -- one operator per step of the epoch cycle (DESIGN section 3); each delegates to
  ``spark_jobs.runtime.cycle`` -- the very functions ``epochal run`` calls.
* ``sensors/`` and ``triggers/`` -- wait for a checkpoint to complete or abort (poke or deferrable).
* ``dag_factory`` -- builds one ``epochal_<job_id>`` DAG per configured job (thin DAG files call it).
* ``config`` -- the deployment's ``EPOCHAL_*`` settings: with ``hooks/`` (``EpochalStoreHook.runtime``:
  the job, store, clock and kill switch of one task) the only modules that read the environment.

Nothing here touches storage or the network at import or DAG-parse time. The demo (``make demo``)
lives outside the package, in ``deploy/demo.py``.
"""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """The provider's description in Airflow's provider-info shape (hooks, operators, sensors,
    triggers, connection types, plugin), as ``apache-airflow-providers-*`` packages give it."""
    return {
        "package-name": "epochal",
        "name": "Epochal",
        "description": "Flink-style checkpoints, savepoints and exactly-once sinks for Spark epochs.",
        "versions": ["0.1.0"],
        "hooks": [{"integration-name": "Epochal", "python-modules": ["epochal_airflow.hooks.store"]}],
        "operators": [
            {
                "integration-name": "Epochal",
                "python-modules": [
                    "epochal_airflow.operators.checkpoint",
                    "epochal_airflow.operators.state",
                    "epochal_airflow.operators.spark_submit",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Epochal", "python-modules": ["epochal_airflow.sensors.checkpoint"]}
        ],
        "triggers": [
            {
                "integration-name": "Epochal",
                "python-modules": ["epochal_airflow.triggers.checkpoint", "epochal_airflow.triggers.lease"],
            }
        ],
        "connection-types": [
            {"hook-class-name": "epochal_airflow.hooks.store.EpochalStoreHook", "connection-type": "aws"}
        ],
        "plugins": [
            {
                "name": "epochal_checkpoints",
                "plugin-class": "epochal_checkpoints_plugin.EpochalCheckpointsPlugin",
            }
        ],
    }
