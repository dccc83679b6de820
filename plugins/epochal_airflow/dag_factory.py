"""One ``epochal_<job_id>`` DAG per job: the epoch cycle as six tasks, one active run at a time::

    trigger_checkpoint >> run_epoch >> complete_checkpoint >> notify_checkpoint_complete
                       >> validate >> apply_retention

A run without new input skips everything after ``trigger_checkpoint``. The job's restart
strategy becomes the tasks' retries; a retried ``run_epoch`` is a new attempt of the same
checkpoint, restoring from the latest completed one (earlier attempts' acks are fenced).
Building a DAG imports the job module to learn its id but touches no storage.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG

from epochal_airflow.config import EpochalSettings
from epochal_airflow.operators.checkpoint import (
    ApplyRetentionOperator,
    CompleteCheckpointOperator,
    NotifyCheckpointCompleteOperator,
    RunEpochOperator,
    TriggerCheckpointOperator,
    ValidateCheckpointOperator,
)

START = pendulum.datetime(2023, 11, 14, tz="UTC")


def dag_id_for(job_id: str) -> str:
    return "epochal_" + job_id.replace("-", "_")


def build_epoch_dag(job_ref: str, settings: EpochalSettings) -> DAG:
    from spark_jobs.jobs.loading import load_job

    job = load_job(job_ref)
    common: dict[str, Any] = {"job": job_ref, "store_uri": settings.store_uri, "conn_id": settings.conn_id}
    with DAG(
        dag_id=dag_id_for(job.job_id),
        description=f"Epoch cycle of Epochal job {job.job_id} ({job.mode}, parallelism {job.parallelism})",
        schedule=settings.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=settings.restart.task_args(),
        tags=["epochal", job.job_id],
        doc_md=__doc__,
    ) as dag:
        trigger = TriggerCheckpointOperator(task_id="trigger_checkpoint", **common, retries=0)
        run = RunEpochOperator(task_id="run_epoch", epoch_executor=settings.executor, **common)
        complete = CompleteCheckpointOperator(task_id="complete_checkpoint", **common, retries=0)
        notify = NotifyCheckpointCompleteOperator(task_id="notify_checkpoint_complete", **common)
        validate = ValidateCheckpointOperator(task_id="validate", **common)
        retain = ApplyRetentionOperator(task_id="apply_retention", **common)
        trigger >> run >> complete >> notify >> validate >> retain
    return dag


def build_all(settings: EpochalSettings | None = None) -> dict[str, DAG]:
    settings = settings or EpochalSettings.from_env()
    dags = [build_epoch_dag(ref, settings) for ref in settings.jobs]
    return {d.dag_id: d for d in dags}
