"""Operators of the epoch cycle (DESIGN section 3), one per step, each a thin call into
``spark_jobs.runtime.cycle``::

    trigger_checkpoint >> run_epoch >> complete_checkpoint >> notify_checkpoint_complete
                       >> validate >> apply_retention

Time: every step of a DAG run uses the run's ``data_interval_end`` as the epoch's clock (so a run is
replayable and its source positions are a function of the run), falling back to the wall clock for
runs without an interval. The checkpoint metadata also records wall-clock times, so durations are
true. Airflow runs a job on the wall clock (``state_store.clocks``): a job recorded as simulated is
refused by ``trigger_checkpoint`` with the remedy. The checkpoint id travels by XCom from
``trigger_checkpoint``. Each step logs one summary line and returns a small JSON-able dict (never
credentials); ``run_epoch`` also logs the epoch's progress every ``progress_interval_s`` seconds per
stage and its summary (records in/out, measured duration, state and incremental size, the Spark UI),
which its XCom (``return_value``) carries as ``epoch_summary``.

The job's lease: every task first acquires the job's lease for its DAG run (holder
``airflow:<dag_id>:<run_id>``; a new token on every task and every try, so an earlier try that still
runs is fenced), renews it while it runs, and passes its fencing token to the step. The epoch DAG's
tasks keep the lease for the run's next task; its last task, a task that fails for good, and every
task of the manual DAGs release it. A task whose job is busy defers (``LeaseFreeTrigger``) instead of
failing, holding no worker slot; a new run of the same DAG takes the lease over from a dead one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from epochal_airflow.hooks.store import EpochalRuntime, EpochalStoreHook, run_clock
from epochal_airflow.triggers.lease import LeaseFreeTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["EpochalOperator", "EpochalRuntime", "run_clock"]

AIRFLOW_LEASE_TTL_MS = 300_000
"""A DAG run's lease outlives the gaps between its tasks (scheduling delays) by this much."""


class EpochalOperator(BaseOperator):
    """Common arguments: which job (example name or ``module:attr``), where its state lives."""

    template_fields: Sequence[str] = ("job_ref", "store_uri", "conn_id")
    ui_color = "#e8f4fd"

    def __init__(
        self,
        *,
        job: str,
        store_uri: str,
        conn_id: str | None = None,
        job_options: dict[str, Any] | None = None,
        trigger_task_id: str = "trigger_checkpoint",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_ref = job
        self.store_uri = store_uri
        self.conn_id = conn_id
        self.job_options = dict(job_options or {})
        self.trigger_task_id = trigger_task_id

    def hook(self) -> EpochalStoreHook:
        return EpochalStoreHook(self.store_uri, self.conn_id)

    def runtime(self, context: Context) -> EpochalRuntime:
        """The job, its store, the run's clock and the kill switch (see ``EpochalStoreHook.runtime``)."""
        return self.hook().runtime(context, self.job_ref, self.job_options)

    def checkpoint_id(self, context: Context) -> int:
        value = context["ti"].xcom_pull(task_ids=self.trigger_task_id)
        if not value or "checkpoint_id" not in value:
            raise AirflowException(
                f"no checkpoint id from task {self.trigger_task_id!r}: it did not trigger one"
            )
        return int(value["checkpoint_id"])

    def summary(self, step: str, **fields: Any) -> dict[str, Any]:
        line = " ".join(f"{k}={v}" for k, v in fields.items())
        self.log.info("epochal %s: job=%s %s", step, self.job_ref, line)
        return fields

    # -- the job's lease (see module docstring) ------------------------------------------------
    #: Whether the task releases the lease when it ends (False: the epoch DAG's tasks but the last).
    releases_lease = True
    lease_poll_s = 5.0

    def execute(self, context: Context, event: Any = None) -> Any:
        rt = self.runtime(context)
        lease = self.hold_lease(context, rt)
        try:
            result = self.execute_leased(context, rt.with_token(lease.token))
        except AirflowSkipException:
            lease.release()  # the run ends here
            raise
        except BaseException:
            if self.is_last_try(context):
                lease.release()
            else:
                lease.detach()
            raise
        if self.releases_lease:
            lease.release()
        else:
            lease.detach()
        return result

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> Any:
        """The step itself, under the job's lease (``rt.token``: its fencing token)."""
        raise NotImplementedError

    def hold_lease(self, context: Context, rt: EpochalRuntime) -> Any:
        """Acquire the job's lease for this DAG run, or defer until it can be taken."""
        from state_store.core.lease import LeaseHeldError
        from state_store.lease_keeper import HeldLease

        ti = context["ti"]
        holder = f"airflow:{ti.dag_id}:{context['run_id']}"
        held = HeldLease(
            rt.store,
            rt.job.job_id,
            holder,
            f"{ti.dag_id}.{ti.task_id}",
            max_parallelism=rt.job.max_parallelism,
            ttl_ms=AIRFLOW_LEASE_TTL_MS,
        )
        try:
            held.acquire()
        except LeaseHeldError as busy:
            self.log.info("epochal %s: %s; deferring until the job's lease is free", ti.task_id, busy)
            self.defer(
                trigger=LeaseFreeTrigger(rt.store_uri, rt.job.job_id, holder, self.lease_poll_s),
                method_name="execute",
            )
        return held

    def is_last_try(self, context: Context) -> bool:
        return int(context["ti"].try_number) > int(self.retries or 0)


class TriggerCheckpointOperator(EpochalOperator):
    """Abort checkpoints of dead earlier runs, then trigger checkpoint n (skips when no new input).

    With ``max_failures``/``failure_interval_s`` (the failure-rate restart strategy, see
    ``operators.restart``) it first counts the job's failed checkpoints in the interval and, when too
    many, pauses the DAG and fails the run without retry, the reason in the error."""

    def __init__(
        self, *, max_failures: int | None = None, failure_interval_s: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.max_failures = max_failures
        self.failure_interval_s = failure_interval_s

    def check_failure_rate(self, rt: EpochalRuntime, context: Context) -> None:
        if self.max_failures is None or self.failure_interval_s is None:
            return
        from epochal_airflow.operators.restart import failure_rate, pause_dag

        job = rt.job
        rate = failure_rate(
            rt.store, job.job_id, rt.clock.now_ms(), self.max_failures, self.failure_interval_s
        )
        if not rate.exceeded:
            return
        paused = pause_dag(context["dag"].dag_id)
        self.summary("trigger_checkpoint", status="failure_rate_exceeded", failures=rate.failures)
        raise AirflowFailException(f"{rate.reason(job.job_id)}; {paused}")

    releases_lease = False

    def check_clock(self, rt: EpochalRuntime, context: Context) -> None:
        """Airflow stamps epochs with the runs' logical dates, i.e. the wall clock: a job that runs
        on a simulated clock is refused (recorded as wall at its first run here)."""
        from state_store.clocks import ClockKind, ClockMismatchError, ensure_clock

        try:
            ensure_clock(
                rt.store,
                rt.job.job_id,
                ClockKind.WALL,
                recorded_by=f"airflow {context['ti'].dag_id}",
                remedy="Airflow runs epochs on real time (its runs' logical dates); run this job with "
                "`epochal run --clock simulated`, or give the Airflow job a new job id (see docs/clocks.md)",
            )
        except ClockMismatchError as exc:
            self.summary("trigger_checkpoint", status="refused", reason="clock")
            raise AirflowFailException(str(exc)) from None

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> dict[str, Any]:
        from spark_jobs.runtime.cycle import JobStoppedError, abort_abandoned, trigger_epoch

        job, store, clock, token = rt.job, rt.store, rt.clock, rt.token
        run_id = context["run_id"]
        self.check_clock(rt, context)
        aborted = abort_abandoned(job, store, clock, run_id, lease_token=token)
        self.check_failure_rate(rt, context)

        def log_rescale(parallelism: Any, plan: str) -> None:
            self.log.warning("epochal: job %s: %s\n%s", job.job_id, parallelism.describe, plan)

        try:
            pending = trigger_epoch(
                job, store, clock, request_id=run_id, lease_token=token, log_rescale=log_rescale
            )
        except JobStoppedError as exc:
            self.summary("trigger_checkpoint", status="stopped")
            raise AirflowSkipException(str(exc)) from None
        if pending is None:
            self.summary("trigger_checkpoint", status="skipped", reason="no new input", aborted=aborted)
            raise AirflowSkipException("no new input since the last checkpoint: the epoch is skipped")
        records = sum(end - start for start, end in pending.positions.get("ranges", {}).values())
        return self.summary(
            "trigger_checkpoint",
            checkpoint_id=pending.checkpoint_id,
            status="triggered",
            records=records,
            parallelism=pending.parallelism or job.parallelism,
            aborted_abandoned=aborted,
        )


class RunEpochOperator(EpochalOperator):
    """Run epoch n (a new attempt on every try): in process, or on Spark ``local[*]`` in process."""

    def __init__(
        self,
        *,
        epoch_executor: str = "spark",
        spark_master: str = "local[*]",
        progress_interval_s: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.progress_interval_s = progress_interval_s
        if epoch_executor not in ("spark", "local"):
            raise ValueError(
                f"epoch_executor={epoch_executor!r} is invalid: use 'spark' (local[*] in process) or "
                "'local'; for a cluster use SparkSubmitEpochOperator (EPOCHAL_EXECUTOR=spark-submit)"
            )
        self.epoch_executor = epoch_executor  # not ``executor``: BaseOperator's Airflow executor field
        self.spark_master = spark_master

    releases_lease = False

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> dict[str, Any]:
        import time

        from spark_jobs.runtime import progress
        from spark_jobs.runtime.cycle import run_epoch

        n = self.checkpoint_id(context)
        spark = None
        if self.epoch_executor == "spark":
            from spark_jobs.runtime.spark_session import get_spark

            spark = get_spark(self.spark_master, f"epochal-{rt.job.job_id}")
        began = time.monotonic()
        reporter = progress.LineReporter(
            lambda line: self.log.info("epochal progress: %s", line), self.progress_interval_s
        )
        with progress.reporting(reporter):
            summaries = run_epoch(
                rt.job,
                rt.store_uri,
                n,
                rt.clock,
                executor=self.epoch_executor,
                spark=spark,
                kill=rt.kill,
                lease_token=rt.token,
            )
        epoch = progress.epoch_summary(
            rt.store,
            rt.job.job_id,
            n,
            "acknowledged",
            summaries,
            int((time.monotonic() - began) * 1000),
            spark_ui=progress.spark_ui_url(spark),
        )
        self.log.info("epochal epoch summary: %s", epoch.line())
        fields = self.summary(
            "run_epoch",
            checkpoint_id=n,
            try_number=context["ti"].try_number,
            rows_out=epoch.records_out,
            records_in=epoch.records_in,
            duration_ms=epoch.duration_ms,
            state_bytes=epoch.state_bytes,
            incremental_bytes=epoch.incremental_bytes,
            spark_ui=epoch.spark_ui,
        )
        return {**fields, "epoch_summary": epoch.to_json()}  # the task's XCom


class CompleteCheckpointOperator(EpochalOperator):
    """Collect the acks of n and commit or abort it; an abort fails the task with the reason."""

    releases_lease = False

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> dict[str, Any]:
        from epochal_airflow.metrics import emit_checkpoint_metrics
        from spark_jobs.runtime.cycle import complete_epoch

        n = self.checkpoint_id(context)
        result = complete_epoch(rt.job, rt.store, rt.clock, n, kill=rt.kill, lease_token=rt.token)
        emit_checkpoint_metrics(rt.store, rt.job.job_id, n)  # never raises
        if result.status == "aborted":
            reason = result.reason.name if result.reason else "UNKNOWN"
            self.summary("complete_checkpoint", checkpoint_id=n, status="aborted", reason=reason)
            raise AirflowException(f"checkpoint {n} aborted ({reason}): {result.message}")
        if result.status != "completed":
            raise AirflowException(
                f"checkpoint {n} is {result.status}: {result.acked}/{result.expected} acks"
            )
        size = result.checkpoint.metadata.state_size if result.checkpoint else 0
        return self.summary(
            "complete_checkpoint",
            checkpoint_id=n,
            status="completed",
            acks=f"{result.acked}/{result.expected}",
            state_bytes=size,
        )


class NotifyCheckpointCompleteOperator(EpochalOperator):
    """Sinks commit every pre-committed transaction up to n (idempotent; finishes a crashed one)."""

    releases_lease = False

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> dict[str, Any]:
        from spark_jobs.runtime.cycle import notify_epoch_complete

        n = self.checkpoint_id(context)
        committed = notify_epoch_complete(rt.job, rt.store, rt.clock, n, kill=rt.kill, lease_token=rt.token)
        return self.summary(
            "notify_checkpoint_complete",
            checkpoint_id=n,
            committed={k: list(v) for k, v in committed.items()},
        )


class ValidateCheckpointOperator(EpochalOperator):
    """Audit the completed checkpoint n: every file read back (size and checksum), then the Great
    Expectations snapshot suite; a failing checkpoint is quarantined (never chosen by an automatic
    restore)."""

    releases_lease = False

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> dict[str, Any]:
        from spark_jobs.lifecycle.checks import validate_checkpoint
        from state_store.core import CheckpointVerificationError, ManifestError

        n = self.checkpoint_id(context)
        try:
            result = validate_checkpoint(rt.job, rt.store, n, rt.clock)
        except (CheckpointVerificationError, ManifestError) as exc:
            raise AirflowException(str(exc)) from None
        self.log.info("epochal validation: %s", result.summary_line())
        if not result.passed:
            raise AirflowException(
                f"checkpoint {n} failed validation and is quarantined: {result.summary_line()}"
            )
        return self.summary("validate", checkpoint_id=n, status="passed", checks=len(result.checks))


class ApplyRetentionOperator(EpochalOperator):
    """Retention and the sinks' orphan sweep; the epoch DAG's last task (it releases the lease)."""

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> dict[str, Any]:
        from spark_jobs.runtime.cycle import apply_job_retention

        plan = apply_job_retention(rt.job, rt.store, rt.clock, kill=rt.kill, lease_token=rt.token)
        return self.summary(
            "apply_retention",
            retained=list(plan.retained),
            discarded=list(plan.discarded),
            deleted_files=len(plan.delete),
        )
