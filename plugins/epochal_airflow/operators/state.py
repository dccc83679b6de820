"""Operators of the manual DAGs: savepoint, restore (with a dry run), backfill, maintenance (the
checkpoint audit, :class:`AuditCheckpointsOperator`).

Their arguments are templated, so a DAG passes ``{{ params.x }}``; each returns a small JSON-able
dict (the restore plan as JSON) and logs one summary line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from epochal_airflow.config import snapshot_roots
from epochal_airflow.hooks.store import EpochalRuntime
from epochal_airflow.operators.checkpoint import EpochalOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class TriggerSavepointOperator(EpochalOperator):
    template_fields: Sequence[str] = ("job_ref", "store_uri", "conn_id", "name", "savepoint_format", "stop")

    def __init__(
        self, *, name: str, savepoint_format: str = "parquet", stop: Any = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.name, self.savepoint_format, self.stop = name, savepoint_format, stop

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> dict[str, Any]:
        from spark_jobs.lifecycle.savepoint import take_savepoint
        from spark_jobs.runtime.cycle import abort_abandoned

        abort_abandoned(rt.job, rt.store, rt.clock, f"savepoint-{self.name}", lease_token=rt.token)
        info = take_savepoint(
            rt.job,
            rt.store_uri,
            rt.clock,
            self.name,
            fmt=self.savepoint_format,
            stop=str(self.stop).lower() == "true",
            lease_token=rt.token,
            kill=rt.kill,
        )
        return self.summary("savepoint", **info)


class RestoreOperator(EpochalOperator):
    template_fields: Sequence[str] = (
        "job_ref",
        "store_uri",
        "conn_id",
        "source",
        "uid_map",
        "parallelism",
        "claim_mode",
        "plan_only",
        "allow_non_restored_state",
    )

    def __init__(
        self,
        *,
        source: str = "latest",
        uid_map: Any = "{}",
        parallelism: Any = None,
        claim_mode: str = "NO_CLAIM",
        dry_run: Any = False,
        allow_non_restored_state: Any = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source, self.uid_map, self.parallelism = source, uid_map, parallelism
        self.claim_mode = claim_mode
        self.plan_only = dry_run  # not ``dry_run``: BaseOperator has a method of that name
        self.allow_non_restored_state = allow_non_restored_state

    def execute(self, context: Context, event: Any = None) -> Any:
        if str(self.plan_only).lower() == "true":  # a dry run changes nothing: no lease
            return self.execute_leased(context, self.runtime(context))
        return super().execute(context, event)

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> dict[str, Any]:
        from spark_jobs.lifecycle.restore import RestoreRequest, restore
        from spark_jobs.lifecycle.restore_render import render_plan

        uid_map = self.uid_map if isinstance(self.uid_map, dict) else json.loads(self.uid_map or "{}")
        parallelism = int(self.parallelism) if self.parallelism not in (None, "", "None") else None
        request = RestoreRequest(
            source=str(self.source),
            uid_map=uid_map,
            claim_mode=str(self.claim_mode),
            dry_run=str(self.plan_only).lower() == "true",
            allow_non_restored_state=str(self.allow_non_restored_state).lower() == "true",
            roots=snapshot_roots(),
        )
        report = restore(
            rt.job,
            rt.store_uri,
            rt.clock,
            request,
            parallelism=parallelism,
            request_id=context["run_id"],
            lease_token=rt.token,
            kill=rt.kill,
        )
        self.log.info("epochal restore plan:\n%s", render_plan(report.plan))
        if not report.plan.ok:
            raise AirflowException(f"restore refused: {report.plan.refusals[0]}")
        return self.summary(
            "restore", dry_run=request.dry_run, checkpoint_id=report.checkpoint_id, plan=report.plan.to_json()
        )


class BackfillOperator(EpochalOperator):
    template_fields: Sequence[str] = (
        "job_ref",
        "store_uri",
        "conn_id",
        "savepoint",
        "new_job_id",
        "until_ms",
        "epochs",
    )

    def __init__(
        self, *, savepoint: str, new_job_id: str, until_ms: Any = None, epochs: Any = 10, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.savepoint, self.new_job_id, self.until_ms, self.epochs = savepoint, new_job_id, until_ms, epochs

    def execute(self, context: Context, event: Any = None) -> dict[str, Any]:
        """The lease is the new job's (the backfill changes nothing of the production job)."""
        from epochal_airflow.triggers.lease import LeaseFreeTrigger
        from spark_jobs.lifecycle.backfill import backfill
        from state_store.core.lease import LeaseHeldError

        rt = self.runtime(context)
        until = int(self.until_ms) if self.until_ms not in (None, "", "None") else None
        holder = f"airflow:{context['ti'].dag_id}:{context['run_id']}"
        try:
            report = backfill(
                rt.job,
                rt.store_uri,
                str(self.savepoint),
                str(self.new_job_id),
                until_ms=until,
                epochs=int(self.epochs),
                holder=holder,
                kill=rt.kill,
                roots=snapshot_roots(),
            )
        except LeaseHeldError as busy:
            self.log.info("epochal backfill: %s; deferring until the job's lease is free", busy)
            self.defer(
                trigger=LeaseFreeTrigger(rt.store_uri, str(self.new_job_id), holder, self.lease_poll_s),
                method_name="execute",
            )
        return self.summary("backfill", **report)


class AuditCheckpointsOperator(EpochalOperator):
    """The audit of the job's stored checkpoints (``epochal validate``; ``state_store.core.audit``):
    every completed checkpoint's metadata and files, with ``deep`` every byte read back and checked
    against its writer's checksum -- the read-back that completion no longer does. It only reads, so
    it holds no lease (epochs go on meanwhile). A damaged file fails the task, each finding (the
    file, the checkpoints referencing it, the remedy) in the log and the error."""

    template_fields: Sequence[str] = ("job_ref", "store_uri", "conn_id", "deep")

    def __init__(self, *, deep: Any = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deep = deep

    def execute(self, context: Context, event: Any = None) -> dict[str, Any]:
        from state_store.core.audit import audit_checkpoints
        from state_store.core.parallel import read_concurrency

        rt = self.runtime(context)
        deep = str(self.deep).lower() == "true"
        report = audit_checkpoints(
            rt.store, rt.job.job_id, deep=deep, concurrency=read_concurrency(rt.store, 16)
        )
        for finding in report.findings:
            self.log.error("epochal audit: DAMAGED %s", finding.line())
        self.log.info("epochal audit: %s", report.summary_line())
        if not report.ok:
            raise AirflowException(report.summary_line())
        return self.summary(
            "validate_checkpoints",
            deep=deep,
            checkpoints=list(report.checkpoints),
            files=report.files,
            bytes_checked=report.bytes_checked,
        )
