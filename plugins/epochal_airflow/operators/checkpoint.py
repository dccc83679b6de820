"""Operators of the epoch cycle (DESIGN section 3), one per step, each a thin call into
``spark_jobs.runtime.cycle``::

    trigger_checkpoint >> run_epoch >> complete_checkpoint >> notify_checkpoint_complete
                       >> validate >> apply_retention

Time: every step of a DAG run uses the run's ``data_interval_end`` as the epoch's clock (so a run is
replayable and its source positions are a function of the run), falling back to the wall clock for
runs without an interval. The checkpoint id travels by XCom from ``trigger_checkpoint``. Each step
logs one summary line and returns a small JSON-able dict (never credentials).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from epochal_airflow.hooks.store import EpochalStoreHook


class FixedClock:
    """The epoch's clock: the run's data-interval end, in ms."""

    def __init__(self, now_ms: int) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now


def run_clock(context: Any) -> FixedClock:
    end = context.get("data_interval_end") or context.get("logical_date")
    if end is None:
        from state_store.clock import SystemClock

        return FixedClock(SystemClock().now_ms())
    return FixedClock(int(end.timestamp() * 1000))


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

    def load(self) -> Any:
        from spark_jobs.jobs.loading import load_job

        return load_job(self.job_ref, **self.job_options)

    def hook(self) -> EpochalStoreHook:
        return EpochalStoreHook(self.store_uri, self.conn_id)

    def checkpoint_id(self, context: Any) -> int:
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

    def check_failure_rate(self, job: Any, store: Any, clock: FixedClock, context: Any) -> None:
        if self.max_failures is None or self.failure_interval_s is None:
            return
        from epochal_airflow.operators.restart import failure_rate, pause_dag

        rate = failure_rate(store, job.job_id, clock.now_ms(), self.max_failures, self.failure_interval_s)
        if not rate.exceeded:
            return
        paused = pause_dag(context["dag"].dag_id)
        self.summary("trigger_checkpoint", status="failure_rate_exceeded", failures=rate.failures)
        raise AirflowFailException(f"{rate.reason(job.job_id)}; {paused}")

    def execute(self, context: Any) -> dict[str, Any]:
        from spark_jobs.runtime.cycle import JobStoppedError, abort_abandoned, ensure_running, trigger_epoch

        job, store, clock = self.load(), self.hook().get_store(), run_clock(context)
        run_id = context["run_id"]
        try:
            ensure_running(job, store)
        except JobStoppedError as exc:
            self.summary("trigger_checkpoint", status="stopped")
            raise AirflowSkipException(str(exc)) from None
        aborted = abort_abandoned(job, store, clock, run_id)
        self.check_failure_rate(job, store, clock, context)
        pending = trigger_epoch(job, store, clock, request_id=run_id)
        if pending is None:
            self.summary("trigger_checkpoint", status="skipped", reason="no new input", aborted=aborted)
            raise AirflowSkipException("no new input since the last checkpoint: the epoch is skipped")
        records = sum(end - start for start, end in pending.positions.get("ranges", {}).values())
        return self.summary(
            "trigger_checkpoint",
            checkpoint_id=pending.checkpoint_id,
            status="triggered",
            records=records,
            aborted_abandoned=aborted,
        )


class RunEpochOperator(EpochalOperator):
    """Run epoch n (a new attempt on every try): in process, or on Spark ``local[*]`` in process."""

    def __init__(
        self, *, epoch_executor: str = "spark", spark_master: str = "local[*]", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if epoch_executor not in ("spark", "local"):
            raise ValueError(
                f"epoch_executor={epoch_executor!r} is invalid: use 'spark' (local[*] in process) or "
                "'local'; for a cluster use SparkSubmitEpochOperator (EPOCHAL_EXECUTOR=spark-submit)"
            )
        self.epoch_executor = epoch_executor  # not ``executor``: BaseOperator's Airflow executor field
        self.spark_master = spark_master

    def execute(self, context: Any) -> dict[str, Any]:
        from spark_jobs.runtime.cycle import run_epoch
        from state_store.testing.killpoints import kill_switch_from_env

        hook = self.hook()
        hook.export_credentials()
        job, n = self.load(), self.checkpoint_id(context)
        spark = None
        if self.epoch_executor == "spark":
            from spark_jobs.runtime.spark_session import get_spark

            spark = get_spark(self.spark_master, f"epochal-{job.job_id}")
        summaries = run_epoch(
            job,
            hook.resolved_uri(),
            n,
            run_clock(context),
            executor=self.epoch_executor,
            spark=spark,
            kill=kill_switch_from_env(),
        )
        rows = sum(int(s.get("rows_out", 0)) for s in summaries)
        return self.summary("run_epoch", checkpoint_id=n, try_number=context["ti"].try_number, rows_out=rows)


class CompleteCheckpointOperator(EpochalOperator):
    """Collect the acks of n and commit or abort it; an abort fails the task with the reason."""

    def execute(self, context: Any) -> dict[str, Any]:
        from spark_jobs.runtime.cycle import complete_epoch
        from state_store.testing.killpoints import kill_switch_from_env

        job, n = self.load(), self.checkpoint_id(context)
        result = complete_epoch(
            job, self.hook().get_store(), run_clock(context), n, kill=kill_switch_from_env()
        )
        from epochal_airflow.metrics import emit_checkpoint_metrics

        emit_checkpoint_metrics(self.hook().get_store(), job.job_id, n)  # never raises
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

    def execute(self, context: Any) -> dict[str, Any]:
        from spark_jobs.runtime.cycle import notify_epoch_complete
        from state_store.testing.killpoints import kill_switch_from_env

        job, n = self.load(), self.checkpoint_id(context)
        committed = notify_epoch_complete(
            job, self.hook().get_store(), run_clock(context), n, kill=kill_switch_from_env()
        )
        return self.summary(
            "notify_checkpoint_complete",
            checkpoint_id=n,
            committed={k: list(v) for k, v in committed.items()},
        )


class ValidateCheckpointOperator(EpochalOperator):
    """Audit the completed checkpoint n: every file's size and SHA-256, then the Great Expectations
    snapshot suite; a failing checkpoint is quarantined (never chosen by an automatic restore)."""

    def execute(self, context: Any) -> dict[str, Any]:
        from spark_jobs.checks import validate_checkpoint
        from state_store.core import CheckpointVerificationError, ManifestError

        job, n, store = self.load(), self.checkpoint_id(context), self.hook().get_store()
        try:
            result = validate_checkpoint(job, store, n, run_clock(context))
        except (CheckpointVerificationError, ManifestError) as exc:
            raise AirflowException(str(exc)) from None
        self.log.info("epochal validation: %s", result.summary_line())
        if not result.passed:
            raise AirflowException(
                f"checkpoint {n} failed validation and is quarantined: {result.summary_line()}"
            )
        return self.summary("validate", checkpoint_id=n, status="passed", checks=len(result.checks))


class ApplyRetentionOperator(EpochalOperator):
    def execute(self, context: Any) -> dict[str, Any]:
        from spark_jobs.runtime.cycle import apply_job_retention
        from state_store.testing.killpoints import kill_switch_from_env

        plan = apply_job_retention(
            self.load(), self.hook().get_store(), run_clock(context), kill=kill_switch_from_env()
        )
        return self.summary(
            "apply_retention",
            retained=list(plan.retained),
            discarded=list(plan.discarded),
            deleted_files=len(plan.delete),
        )
