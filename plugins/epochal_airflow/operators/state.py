"""Operators of the manual DAGs: savepoint, restore (with a dry run), backfill, maintenance (the
checkpoint audit, :class:`AuditCheckpointsOperator`).

Their arguments are templated, so a DAG passes ``{{ params.x }}``; each returns a small JSON-able
dict (the restore plan as JSON) and logs one summary line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from epochal_airflow.config import snapshot_roots
from epochal_airflow.hooks.store import EpochalRuntime
from epochal_airflow.operators.approval import (
    APPROVAL_TASK_ID,
    PlanTicket,
    RestorePlanOperator,
    is_true,
    plan_ticket,
)
from epochal_airflow.operators.checkpoint import EpochalOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

APPROVE = "Approve"  # ApprovalOperator.APPROVE


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


class RestoreOperator(RestorePlanOperator):
    """Restore the job (``spark_jobs.lifecycle.restore``) under its lease.

    With ``plan_task_id`` (the ``epochal_restore`` DAG) it applies the plan of that task as approved
    by ``approval_task_id`` -- exactly as shown after a person's approval, else refused with one
    line before anything is written; see :mod:`epochal_airflow.operators.approval`. Without it, it
    plans and applies in one step (a dry run only plans, without the lease)."""

    def __init__(
        self,
        *,
        plan_task_id: str | None = None,
        approval_task_id: str = APPROVAL_TASK_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.plan_task_id, self.approval_task_id = plan_task_id, approval_task_id
        self._ticket: PlanTicket | None = None
        self._by_person = False

    def execute(self, context: Context, event: Any = None) -> Any:
        if self.plan_task_id is None:
            if is_true(self.plan_only, "dry_run"):  # a dry run changes nothing: no lease
                return self.execute_leased(context, self.runtime(context))
            return EpochalOperator.execute(self, context, event)
        ti = context["ti"]
        self._ticket = PlanTicket.from_xcom(ti.xcom_pull(task_ids=self.plan_task_id), self.plan_task_id)
        approval = ti.xcom_pull(task_ids=self.approval_task_id) or {}
        if APPROVE not in approval.get("chosen_options", []):
            raise AirflowFailException(
                f"restore of job {self._ticket.job_id} was not approved in task {self.approval_task_id!r}: "
                "nothing was restored"
            )
        if approval.get("ticket") != self._ticket.digest():
            raise AirflowFailException(
                f"restore of job {self._ticket.job_id}: the plan of task {self.plan_task_id!r} is not the "
                f"one approved in task {self.approval_task_id!r} (a task was re-run after the approval): "
                f"nothing was restored; clear {self.approval_task_id!r} too to review this plan"
            )
        self._by_person = not approval.get("auto_approved", False)
        if self._by_person:  # refuse before the lease is even taken: nothing at all is written
            self.check_approved_plan(context, self.runtime(context))
        return EpochalOperator.execute(self, context, event)

    def hold_lease(self, context: Context, rt: EpochalRuntime) -> Any:
        """A person approved a plan of the job as it was: a busy job is refused, not waited for."""
        if not self._by_person:
            return super().hold_lease(context, rt)
        try:
            return super().hold_lease(context, rt)
        except TaskDeferred:
            raise AirflowFailException(self.busy_refusal(rt.job.job_id, "another actor")) from None

    def busy_refusal(self, job_id: str, who: str) -> str:
        return (
            f"job {job_id} is busy ({who} holds its lease) since its restore plan was approved: nothing "
            "was restored; trigger epochal_restore again once it is free to review a new plan"
        )

    def check_approved_plan(self, context: Context, rt: EpochalRuntime) -> None:
        """Refuse (one line) unless the job and the plan are still as the person approved them."""
        from state_store.clocks import SystemClock
        from state_store.core import JobRecords
        from state_store.core.lease import describe
        from state_store.core.restore import plan_from_json

        assert self._ticket is not None
        record = JobRecords(rt.store, rt.job.job_id).read()
        lease = record.lease if record is not None else None
        mine = f"airflow:{context['ti'].dag_id}:{context['run_id']}"
        if lease is not None and lease.holder != mine and lease.expires_ms > SystemClock().now_ms():
            raise AirflowFailException(self.busy_refusal(rt.job.job_id, describe(lease)))
        request = dataclasses.replace(self.request(), source=self._ticket.source, dry_run=True)
        now = plan_ticket(rt, request, self.new_parallelism(), context["run_id"])
        refusal = self._ticket.refusal(now.position, plan_from_json(now.plan), now.snapshot_digest)
        if refusal is not None:
            raise AirflowFailException(refusal)

    def execute_leased(self, context: Context, rt: EpochalRuntime) -> dict[str, Any]:
        from spark_jobs.lifecycle.restore import restore
        from spark_jobs.lifecycle.restore_render import render_plan
        from state_store.core.restore import plan_from_json

        request = self.request()
        if self._ticket is not None:
            request = dataclasses.replace(request, dry_run=False)
            if self._by_person:  # again under the lease: nothing can change between check and import
                request = dataclasses.replace(request, source=self._ticket.source)
                self.check_approved_plan(context, rt)
            else:
                now = plan_ticket(rt, request, self.new_parallelism(), context["run_id"])
                if now.snapshot_digest != self._ticket.snapshot_digest:
                    raise AirflowFailException(
                        self._ticket.refusal(
                            self._ticket.position, plan_from_json(self._ticket.plan), now.snapshot_digest
                        )
                    )
                if now.lossy:
                    raise AirflowFailException(
                        f"the restore plan of job {rt.job.job_id} now loses something ({now.losses[0]}) "
                        "but was approved automatically as lossless: nothing was restored; trigger "
                        "epochal_restore again to review and approve it"
                    )
        report = restore(
            rt.job,
            rt.store_uri,
            rt.clock,
            request,
            parallelism=self.new_parallelism(),
            request_id=context["run_id"],
            lease_token=rt.token,
            kill=rt.kill,
        )
        self.log.info("epochal restore plan:\n%s", render_plan(report.plan))
        if not report.plan.ok:
            raise AirflowException(f"restore refused: {report.plan.refusals[0]}")
        return self.summary(
            "restore",
            dry_run=request.dry_run,
            source=request.source,
            approved_by_person=self._by_person,
            checkpoint_id=report.checkpoint_id,
            plan=report.plan.to_json(),
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
