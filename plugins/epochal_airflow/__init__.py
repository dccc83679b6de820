"""Epochal for Airflow, shaped like an Airflow provider (as apache-airflow-providers-apache-spark):

* ``hooks/``     -- :class:`EpochalStoreHook`: an Airflow connection (Amazon provider's ``aws`` type,
  endpoint URL in the extras) -> an ObjectStore; credentials stay inside the hook.
* ``operators/`` -- one operator per step of the epoch cycle (DESIGN section 3); each delegates to
  ``spark_jobs.runtime.cycle`` -- the very functions ``epochal run`` calls.
* ``sensors/`` and ``triggers/`` -- wait for a checkpoint to complete or abort (poke or deferrable).
* ``dag_factory`` -- builds one ``epochal_<job_id>`` DAG per configured job (thin DAG files call it).

Nothing here touches storage or the network at import or DAG-parse time.
"""
