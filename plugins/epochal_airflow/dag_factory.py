"""One ``epochal_<job_id>`` DAG per job: the epoch cycle as six tasks, one active run at a time::

    trigger_checkpoint >> run_epoch >> complete_checkpoint >> notify_checkpoint_complete
                       >> validate >> apply_retention

A run without new input skips everything after ``trigger_checkpoint``. The job's restart
strategy becomes the tasks' retries; a retried ``run_epoch`` is a new attempt of the same
checkpoint, restoring from the latest completed one (earlier attempts' acks are fenced). With the
failure-rate strategy, ``trigger_checkpoint`` fails the run and pauses the DAG when too many
checkpoints failed within the interval. ``run_epoch`` runs in the worker (``spark``/``local``) or is
the provider's ``SparkSubmitOperator`` (``spark-submit``) against a Spark cluster.

Data-aware schedule (``EPOCHAL_SCHEDULE=assets``): the DAG is scheduled on one Airflow Asset per
source (:func:`source_asset`); whoever appends input emits an event for that asset (a producer
task's ``outlets``, or the REST API) and the scheduler queues an epoch; an epoch that finds no new
input still short-circuits. A landing zone (``PrefixSource``) needs no producer's help: its asset
carries an ``AssetWatcher`` whose trigger polls the prefix every ``EPOCHAL_LANDING_POLL_S`` seconds
(default 30) and fires while settled files wait unread (``triggers/landing.py``).

Backfill: an epoch DAG refuses Airflow's own backfill (``allowed_run_types`` has every run type
but ``backfill``, so ``airflow backfill create``, the REST API and the UI refuse it before any run
exists). Epochs form one chain that only moves forward from the latest checkpoint; a run for a past
interval would not reprocess that interval but start a new epoch at an old time. To reprocess
history, use the ``epochal_backfill`` DAG: it forks the job from a savepoint into a new job id with
its own sinks (docs/operations.md, "Backfill").

Building a DAG imports the job module to learn its id but touches no storage.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, AssetAny, AssetWatcher, Param
from airflow.sdk.api.datamodels._generated import DagRunType  # what DAG(allowed_run_types=) takes

from epochal_airflow.config import EpochalSettings
from epochal_airflow.operators.approval import (
    APPROVAL_TASK_ID,
    MAX_TIMEOUT_MINUTES,
    PLAN_TASK_ID,
    RestoreApprovalOperator,
    RestorePlanOperator,
)
from epochal_airflow.operators.checkpoint import (
    ApplyRetentionOperator,
    CompleteCheckpointOperator,
    NotifyCheckpointCompleteOperator,
    RunEpochOperator,
    TriggerCheckpointOperator,
    ValidateCheckpointOperator,
)
from epochal_airflow.operators.spark_submit import SparkSubmitEpochOperator
from epochal_airflow.operators.state import (
    AuditCheckpointsOperator,
    BackfillOperator,
    RestoreOperator,
    TriggerSavepointOperator,
)

log = logging.getLogger(__name__)
START = pendulum.datetime(2023, 11, 14, tz="UTC")


EPOCH_RUN_TYPES = tuple(t for t in DagRunType if t is not DagRunType.BACKFILL)
"""Every Airflow run type but ``backfill``: see the module docstring."""


def dag_id_for(job_id: str) -> str:
    return "epochal_" + job_id.replace("-", "_")


def source_asset(job: Any, source: Any, job_ref: str | None = None, poll_interval: float = 30.0) -> Asset:
    """The Asset standing for one source's input: the source's own ``asset_uri`` or ``location``
    when it has one (e.g. ``s3://bucket/clicks/``), else ``epochal://<job_id>/sources/<uid>``. A
    source with a landing zone (``unread_files``: a ``PrefixSource``) is watched when ``job_ref``
    is given: the asset's ``AssetWatcher`` runs ``NewLandingFilesTrigger`` in the triggerer, so a file
    dropped into the prefix queues an epoch by itself."""
    uri = getattr(source, "asset_uri", None) or getattr(source, "location", None)
    if not isinstance(uri, str) or not uri:
        uri = f"epochal://{job.job_id}/sources/{source.uid}"
    watchers = []
    if job_ref is not None and hasattr(source, "unread_files"):
        from epochal_airflow.triggers.landing import NewLandingFilesTrigger, check_watchable

        check_watchable(job.job_id, source)  # a memory:// landing zone: an import error, not a silent watch
        trigger = NewLandingFilesTrigger(job_ref, source.uid, poll_interval)
        watchers.append(AssetWatcher(name=f"{job.job_id}.{source.uid}.files", trigger=trigger))
    return Asset(uri=uri, name=f"{job.job_id}.{source.uid}", group="epochal-source", watchers=watchers)


def source_assets(job: Any, job_ref: str | None = None, poll_interval: float = 30.0) -> AssetAny:
    """The epoch DAG's data-aware schedule: new input on *any* source makes an epoch runnable."""
    from spark_jobs.api.specs import SourceSpec

    return AssetAny(
        *(
            source_asset(job, spec.source, job_ref, poll_interval)
            for _, spec in job.graph.steps_of(SourceSpec)
        )
    )


def run_epoch_task(settings: EpochalSettings, common: dict[str, Any]) -> Any:
    if settings.executor == "spark-submit":
        return SparkSubmitEpochOperator(
            task_id="run_epoch",
            job=common["job"],
            store_uri=common["store_uri"],
            store_conn_id=common["conn_id"],
            spark_conn_id=settings.spark_conn_id,
            spark_conf=settings.spark_conf,
        )
    return RunEpochOperator(task_id="run_epoch", epoch_executor=settings.executor, **common)


def build_epoch_dag(job_ref: str, settings: EpochalSettings) -> DAG:
    from spark_jobs.jobs.loading import load_job

    job = load_job(job_ref)
    common: dict[str, Any] = {"job": job_ref, "store_uri": settings.store_uri, "conn_id": settings.conn_id}
    restart = settings.restart
    failure_rate: dict[str, Any] = {}
    if restart.failure_rate and restart.failure_interval is not None:
        failure_rate = {
            "max_failures": restart.max_failures,
            "failure_interval_s": restart.failure_interval.total_seconds(),
        }
    with DAG(
        dag_id=dag_id_for(job.job_id),
        description=f"Epoch cycle of Epochal job {job.job_id} ({job.mode}, parallelism {job.parallelism})",
        schedule=source_assets(job, job_ref, settings.landing_poll_s)
        if settings.data_aware
        else settings.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        allowed_run_types=EPOCH_RUN_TYPES,
        default_args=settings.restart.task_args(),
        tags=["epochal", job.job_id],
        doc_md=__doc__,
    ) as dag:
        trigger = TriggerCheckpointOperator(task_id="trigger_checkpoint", **common, **failure_rate, retries=0)
        run = run_epoch_task(settings, common)
        complete = CompleteCheckpointOperator(task_id="complete_checkpoint", **common, retries=0)
        notify = NotifyCheckpointCompleteOperator(task_id="notify_checkpoint_complete", **common)
        validate = ValidateCheckpointOperator(task_id="validate", **common)
        retain = ApplyRetentionOperator(task_id="apply_retention", **common)
        trigger >> run >> complete >> notify >> validate >> retain
    return dag


def build_manual_dags(settings: EpochalSettings) -> list[DAG]:
    """``epochal_savepoint``, ``epochal_restore``, ``epochal_backfill``, ``epochal_maintenance``:
    triggered by hand with typed params; ``job`` picks one of the configured jobs."""
    jobs = list(settings.jobs)
    job_param = Param(jobs[0] if jobs else "", type="string", enum=jobs or [""], description="the job")
    common: dict[str, Any] = {
        "job": "{{ params.job }}",
        "store_uri": settings.store_uri,
        "conn_id": settings.conn_id,
    }

    def manual(dag_id: str, description: str, params: dict[str, Param], doc_md: str | None = None) -> DAG:
        return DAG(
            dag_id=dag_id,
            description=description,
            schedule=None,
            start_date=START,
            catchup=False,
            max_active_runs=1,
            params={"job": job_param, **params},
            tags=["epochal"],
            render_template_as_native_obj=False,
            doc_md=doc_md,
        )

    with manual(
        "epochal_savepoint",
        "Take a named savepoint (self-contained, canonical Parquet)",
        {
            "name": Param("manual", type="string", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"),
            "format": Param("parquet", type="string", enum=["parquet", "arrow"]),
            "stop": Param(
                False, type="boolean", description="stop-with-savepoint: no epochs until a restore"
            ),
        },
    ) as savepoint:
        TriggerSavepointOperator(
            task_id="trigger_savepoint",
            name="{{ params.name }}",
            savepoint_format="{{ params.format }}",
            stop="{{ params.stop }}",
            **common,
        )
    with manual(
        "epochal_restore",
        "Restore a job from latest, a checkpoint id or a savepoint location; a plan that loses "
        "something waits for a person's approval",
        {
            "source": Param("latest", type="string", description="latest | checkpoint id | savepoint URI"),
            "allow_non_restored_state": Param(False, type="boolean"),
            "uid_map": Param({}, type="object", description="old uid -> new uid"),
            "parallelism": Param(None, type=["null", "integer"], minimum=1),
            "claim_mode": Param("NO_CLAIM", type="string", enum=["NO_CLAIM", "CLAIM"]),
            "dry_run": Param(True, type="boolean"),
            "auto_approve": Param(
                True,
                type="boolean",
                description="apply a plan that loses nothing without waiting; a plan that drops "
                "state, rescales, maps uids or rewinds always waits for a person",
            ),
            "approval_timeout_minutes": Param(
                1440,
                type=["null", "number"],
                exclusiveMinimum=0,
                maximum=MAX_TIMEOUT_MINUTES,
                description="an approval not given within this time is a rejection (null: wait forever)",
            ),
        },
        doc_md=approval_doc(),
    ) as restore:
        plan_args: dict[str, Any] = {
            "source": "{{ params.source }}",
            "uid_map": "{{ params.uid_map | tojson }}",
            "parallelism": "{{ params.parallelism }}",
            "claim_mode": "{{ params.claim_mode }}",
            "dry_run": "{{ params.dry_run }}",
            "allow_non_restored_state": "{{ params.allow_non_restored_state }}",
            **common,
        }
        plan = RestorePlanOperator(task_id=PLAN_TASK_ID, **plan_args)
        approve = RestoreApprovalOperator(
            task_id=APPROVAL_TASK_ID,
            auto_approve="{{ params.auto_approve }}",
            timeout_minutes="{{ params.approval_timeout_minutes }}",
        )
        apply = RestoreOperator(task_id="restore", plan_task_id=PLAN_TASK_ID, **plan_args)
        plan >> approve >> apply
    with manual(
        "epochal_backfill",
        "Fork a job from a savepoint into a new job id and reprocess into its own sinks",
        {
            "savepoint": Param("", type="string", description="savepoint location URI"),
            "new_job_id": Param("backfill", type="string", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"),
            "until_ms": Param(None, type=["null", "integer"]),
            "epochs": Param(10, type="integer", minimum=1),
        },
    ) as backfill:
        BackfillOperator(
            task_id="backfill",
            savepoint="{{ params.savepoint }}",
            new_job_id="{{ params.new_job_id }}",
            until_ms="{{ params.until_ms }}",
            epochs="{{ params.epochs }}",
            **common,
        )
    with manual(
        "epochal_maintenance",
        "Retention, sink orphan sweep, then the audit of the retained checkpoints (epochal validate)",
        {
            "deep": Param(
                True,
                type="boolean",
                description="read every state file back and check its checksum (else presence and sizes)",
            )
        },
    ) as maintenance:
        retain = ApplyRetentionOperator(task_id="apply_retention", **common)
        audit = AuditCheckpointsOperator(
            task_id="validate_checkpoints",
            deep="{{ params.deep }}",
            trigger_rule="all_done",  # audit what is stored even when retention failed
            **common,
        )
        retain >> audit
    return [savepoint, restore, backfill, maintenance]


def approval_doc() -> str:
    from epochal_airflow.operators import approval

    return approval.__doc__ or ""


def build_all(settings: EpochalSettings | None = None) -> dict[str, DAG]:
    """Every configured job's epoch DAG and the manual DAGs. A job reference that cannot be loaded
    breaks only its own DAG: it becomes ``epochal_broken_<ref>`` (paused, unscheduled) whose
    description and only task give the error and the remedy; the other DAGs are built as usual."""
    settings = settings or EpochalSettings.from_env()
    dags = []
    for ref in settings.jobs:
        try:
            dags.append(build_epoch_dag(ref, settings))
        except Exception as exc:  # one bad job module must not take every Epochal DAG with it
            message = broken_job_message(ref, exc)
            log.error("%s", message)
            dags.append(build_broken_dag(ref, message))
    dags += build_manual_dags(settings)
    return {d.dag_id: d for d in dags}


def broken_job_message(ref: str, exc: BaseException) -> str:
    """One line: which job reference, what failed, and what to do."""
    module = ref.partition(":")[0] if ":" in ref else ref
    return (
        f"Epochal job {ref!r} cannot be loaded: {type(exc).__name__}: {exc} -- make module {module!r} "
        "importable by the scheduler and workers (a package installed in their environment, or a "
        "folder on PYTHONPATH, e.g. the project's jobs/ folder), or remove it from EPOCHAL_JOBS"
    )


def broken_dag_id(ref: str) -> str:
    return "epochal_broken_" + re.sub(r"[^A-Za-z0-9_]+", "_", ref).strip("_")


def build_broken_dag(ref: str, message: str) -> DAG:
    """A placeholder for a job that cannot be loaded: visible in the DAG list with the error, paused;
    triggering it fails its only task with the same message."""
    from airflow.providers.standard.operators.python import PythonOperator

    with DAG(
        dag_id=broken_dag_id(ref),
        description=message[:1_000],
        schedule=None,
        start_date=START,
        catchup=False,
        is_paused_upon_creation=True,
        tags=["epochal", "broken"],
        doc_md=f"**This job does not load.**\n\n{message}",
    ) as dag:
        PythonOperator(task_id="job_does_not_load", python_callable=_raise_broken, op_args=[message])
    return dag


def _raise_broken(message: str) -> None:
    raise RuntimeError(message)
