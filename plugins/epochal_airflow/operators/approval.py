"""Restores that wait for a human when they lose something: the ``epochal_restore`` DAG::

    plan_restore >> approve_restore >> restore

1. ``plan_restore`` (:class:`RestorePlanOperator`; no lease, writes nothing): the dry run. It logs
   the plan table and returns the *ticket* (:class:`PlanTicket`): the plan, why it loses something
   (:func:`spark_jobs.lifecycle.restore_losses.restore_losses`: dropped state, a rescale, a uid
   mapping, a rewind), the snapshot it names (``latest`` pinned to a checkpoint id) and the job as
   it was (latest completed checkpoint, generation). A refused plan fails here.
2. ``approve_restore`` (:class:`RestoreApprovalOperator`, Airflow's human-in-the-loop
   ``ApprovalOperator``):

   * ``dry_run`` -- skipped, so ``restore`` is skipped: nothing changes;
   * a lossless plan with ``auto_approve`` (the default) -- approved at once, without waiting;
   * otherwise (every lossy plan, whatever ``auto_approve`` says; every plan when ``auto_approve``
     is false) -- the task waits in ``awaiting_input`` showing the plan and its losses (Airflow's
     Required Actions page, or the HITL REST API). *Approve* lets ``restore`` run; *Reject*, or no
     answer within ``approval_timeout_minutes`` (the default answer is Reject), skips it: nothing
     changes. No setting approves a lossy plan without a person.
3. ``restore`` (:class:`~epochal_airflow.operators.state.RestoreOperator`). After a human approval
   it applies exactly the plan that was shown or nothing: it refuses with one line, before it
   writes anything, when the job moved on since the plan (:meth:`PlanTicket.refusal`: another
   checkpoint completed, another restore ran, the plan is no longer the same, the savepoint's
   bytes are not the ones planned) or another actor holds the job's lease. After an automatic
   approval it behaves as a restore always did (waits for the lease, restores ``latest`` as of its
   commit), but refuses a plan that has become lossy or a savepoint whose bytes changed.

Invariants: an answer is bound to one ticket (its digest travels with the answer), so a
``plan_restore`` re-run after the approval is never applied with it; the conf is checked before
anything is planned (unknown keys, booleans that are not booleans, a timeout that is not above 0
and at most a year: one line each).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from epochal_airflow.hooks.store import EpochalRuntime
from epochal_airflow.operators.checkpoint import EpochalOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from spark_jobs.lifecycle.restore import RestoreRequest
    from state_store.core.restore import RestorePlan

PLAN_TASK_ID = "plan_restore"
APPROVAL_TASK_ID = "approve_restore"
SHOWN_KEY = "shown_ticket"  # approve_restore's own XCom: the digest of the ticket a person was shown
MAX_TIMEOUT_MINUTES = 525_600  # a year: beyond it a deadline is a typo (and soon not a datetime)


def is_true(value: Any, name: str = "flag") -> bool:
    """A templated boolean (rendered as text unless the DAG renders native objects): ``True`` or
    ``"true"``/``"false"`` in any case; anything else (``"yes"``, ``"0"``, ``"flase"``) is refused
    with one line naming ``name``, never guessed -- a mistyped ``dry_run`` must not restore."""
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise AirflowFailException(f"{name} must be true or false, got {value!r}: fix the DAG run conf")
    return text == "true"


def timeout_minutes(value: Any) -> timedelta | None:
    """``approval_timeout_minutes`` as a deadline (None: wait forever); finite, above 0, at most a
    year, else one line naming it."""
    if value in (None, "", "None"):
        return None
    try:
        minutes = float(value)
    except (TypeError, ValueError):
        minutes = math.nan
    if not math.isfinite(minutes) or not 0 < minutes <= MAX_TIMEOUT_MINUTES:
        raise AirflowFailException(
            f"approval_timeout_minutes must be a number of minutes above 0 and at most "
            f"{MAX_TIMEOUT_MINUTES} (a year), or null to wait forever; got {value!r}: fix the DAG run conf"
        )
    return timedelta(minutes=minutes)


def unknown_conf_keys(conf: Mapping[str, Any] | None, params: Sequence[str], dag_id: str) -> str | None:
    """One line for the first conf key the DAG has no param for (a typo such as ``paralellism``
    would otherwise be ignored and the restore run without it); None: every key is known."""
    for key in sorted(conf or {}):
        if key not in params:
            close = difflib.get_close_matches(key, params, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            return (
                f"{dag_id} has no parameter {key!r}: {hint}known: {', '.join(sorted(params))}; "
                "nothing was planned, trigger it again with a corrected conf"
            )
    return None


@dataclass(frozen=True)
class JobPosition:
    """Where the job stood: its latest completed checkpoint (None: none) and its generation."""

    latest_checkpoint_id: int | None
    generation: int

    @classmethod
    def read(cls, rt: EpochalRuntime) -> JobPosition:
        from spark_jobs.runtime.cycle import coordinator_for
        from state_store.core import JobRecords

        record = JobRecords(rt.store, rt.job.job_id).read()
        latest = coordinator_for(rt.job, rt.store, rt.clock).latest_completed()
        return cls(latest.checkpoint_id if latest is not None else None, record.generation if record else 0)

    def describe(self) -> str:
        latest = "none" if self.latest_checkpoint_id is None else str(self.latest_checkpoint_id)
        return f"latest completed checkpoint {latest}, generation {self.generation}"


@dataclass(frozen=True)
class PlanTicket:
    """What ``plan_restore`` hands on by XCom: the plan, its losses, the snapshot it names, the job's
    position when planned, and the plan table (see the module docstring). JSON-able."""

    job_id: str
    source: str  # "latest" is pinned to the checkpoint id the plan restores
    plan: dict[str, Any]
    losses: tuple[str, ...]
    position: JobPosition
    text: str
    dry_run: bool
    # SHA-256 of a savepoint's ``_metadata.json`` (it lists every file's SHA-256): the bytes the plan
    # restores. None for a checkpoint of the job (its id is never reused).
    snapshot_digest: str | None = None

    def digest(self) -> str:
        """What an approval is bound to: this ticket exactly (a re-run plan is another ticket)."""
        return hashlib.sha256(json.dumps(self.to_xcom(), sort_keys=True).encode()).hexdigest()

    @property
    def lossy(self) -> bool:
        return bool(self.losses)

    def to_xcom(self) -> dict[str, Any]:
        document = asdict(self)
        document["losses"] = list(self.losses)
        return document

    @classmethod
    def from_xcom(cls, value: Any, task_id: str = PLAN_TASK_ID) -> PlanTicket:
        if not isinstance(value, dict) or "plan" not in value:
            raise AirflowException(
                f"no restore plan from task {task_id!r}: run the epochal_restore DAG from its first task"
            )
        fields = dict(value)
        fields["losses"] = tuple(fields["losses"])
        fields["position"] = JobPosition(**fields["position"])
        return cls(**fields)

    def refusal(self, now: JobPosition, plan: RestorePlan, snapshot_digest: str | None = None) -> str | None:
        """Why the approved plan can no longer be applied as shown (None: it can)."""
        remedy = "nothing was restored; trigger epochal_restore again to review a new plan"
        if snapshot_digest != self.snapshot_digest:
            return (
                f"the snapshot at {self.source} is not the one approved for job {self.job_id} "
                f"(replaced or altered since the plan): {remedy}"
            )
        if now != self.position:
            return (
                f"job {self.job_id} changed since its restore plan was approved ({self.position.describe()} "
                f"then, {now.describe()} now): {remedy}"
            )
        if json.dumps(plan.to_json(), sort_keys=True) != json.dumps(self.plan, sort_keys=True):
            return f"the restore plan of job {self.job_id} is no longer the one approved: {remedy}"
        return None


def plan_ticket(
    rt: EpochalRuntime, request: RestoreRequest, parallelism: int | None, request_id: str
) -> PlanTicket:
    """Plan ``request`` without changing anything (a dry run) and describe what it loses."""
    import dataclasses

    from spark_jobs.lifecycle.restore import restore
    from spark_jobs.lifecycle.restore_losses import restore_losses
    from spark_jobs.lifecycle.restore_render import render_plan
    from spark_jobs.runtime.cycle import sink_specs

    position = JobPosition.read(rt)
    dry = dataclasses.replace(request, dry_run=True)
    plan = restore(rt.job, rt.store_uri, rt.clock, dry, parallelism=parallelism, request_id=request_id).plan
    retracting = [
        uid for uid, spec in sink_specs(rt.job).items() if getattr(spec, "on_rewind", "") == "overwrite"
    ]
    losses = restore_losses(
        plan, latest_checkpoint_id=position.latest_checkpoint_id, retracting_sinks=retracting
    )
    source = request.source
    if source == "latest" and plan.snapshot.checkpoint_id is not None:
        source = str(plan.snapshot.checkpoint_id)
    return PlanTicket(
        rt.job.job_id,
        source,
        plan.to_json(),
        losses,
        position,
        render_plan(plan),
        request.dry_run,
        savepoint_digest(source),
    )


def savepoint_digest(source: str) -> str | None:
    """SHA-256 of the savepoint manifest at ``source`` (None: a checkpoint of the job, or gone)."""
    from spark_jobs.lifecycle.snapshots import savepoint_store
    from state_store.core.ports import ObjectNotFound

    if source == "latest" or source.isdigit():
        return None
    try:
        return hashlib.sha256(savepoint_store(source).get("_metadata.json").data).hexdigest()
    except ObjectNotFound:
        return None


class RestorePlanOperator(EpochalOperator):
    """Step 1 of the module docstring: the dry run; returns the :class:`PlanTicket` as a dict."""

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

    def request(self) -> RestoreRequest:
        from epochal_airflow.config import snapshot_roots
        from spark_jobs.lifecycle.restore import RestoreRequest

        uid_map = self.uid_map if isinstance(self.uid_map, dict) else json.loads(self.uid_map or "{}")
        return RestoreRequest(
            source=str(self.source),
            uid_map=uid_map,
            claim_mode=str(self.claim_mode),
            dry_run=is_true(self.plan_only, "dry_run"),
            allow_non_restored_state=is_true(self.allow_non_restored_state, "allow_non_restored_state"),
            roots=snapshot_roots(),
        )

    def new_parallelism(self) -> int | None:
        return int(self.parallelism) if self.parallelism not in (None, "", "None") else None

    def execute(self, context: Context, event: Any = None) -> dict[str, Any]:
        from state_store.core.restore import plan_from_json

        dag_run = context.get("dag_run")
        unknown = unknown_conf_keys(
            getattr(dag_run, "conf", None), list(context.get("params") or {}), context["ti"].dag_id
        )
        if unknown is not None:
            raise AirflowFailException(unknown)
        rt = self.runtime(context)
        ticket = plan_ticket(rt, self.request(), self.new_parallelism(), context["run_id"])
        self.log.info("epochal restore plan:\n%s", ticket.text)
        plan = plan_from_json(ticket.plan)
        if not plan.ok:
            raise AirflowException(f"restore refused: {plan.refusals[0]}")
        for loss in ticket.losses:
            self.log.warning("epochal restore plan loses something: %s", loss)
        self.summary(
            "plan_restore",
            source=ticket.source,
            lossy=ticket.lossy,
            losses=len(ticket.losses),
            dry_run=ticket.dry_run,
        )
        return ticket.to_xcom()


class RestoreApprovalOperator(ApprovalOperator):
    """Step 2 of the module docstring. ``defaults`` is Reject, so a request that times out (the
    scheduler's ``awaiting_input`` sweep) is a rejection: ``restore`` is skipped."""

    template_fields: Sequence[str] = ("subject", "body", "auto_approve", "timeout_minutes")
    ui_color = "#fdf3e8"

    def __init__(
        self,
        *,
        auto_approve: Any = True,
        timeout_minutes: Any = None,
        plan_task_id: str = PLAN_TASK_ID,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("subject", "Approve the restore plan")
        super().__init__(defaults=ApprovalOperator.REJECT, **kwargs)
        self.auto_approve, self.timeout_minutes = auto_approve, timeout_minutes
        self.plan_task_id = plan_task_id

    def execute(self, context: Context) -> Any:
        """The answer (an XCom) carries ``ticket``: the digest of the ticket approved, so ``restore``
        applies that ticket or nothing (a ``plan_restore`` re-run after the approval is another)."""
        ticket = PlanTicket.from_xcom(context["ti"].xcom_pull(task_ids=self.plan_task_id), self.plan_task_id)
        if ticket.dry_run:
            raise AirflowSkipException("dry run: the plan is in the plan_restore log; nothing is restored")
        auto = is_true(self.auto_approve, "auto_approve")
        deadline = timeout_minutes(self.timeout_minutes)
        if not ticket.lossy and auto:
            self.log.info("epochal approve_restore: the plan loses nothing; approved (auto_approve)")
            return {"chosen_options": [self.APPROVE], "auto_approved": True, "ticket": ticket.digest()}
        if deadline is not None:
            self.response_timeout = deadline
        self.subject, self.body = approval_text(ticket, self.response_timeout)
        # kept while the task awaits input (Airflow clears a task's XComs only on a new try)
        context["ti"].xcom_push(key=SHOWN_KEY, value=ticket.digest())
        self.log.info("epochal approve_restore: waiting for a person to approve:\n%s", self.body)
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Log the answer first: on Reject the base class skips ``restore`` by raising."""
        if "error" not in event:
            chosen = (event.get("chosen_options") or [""])[0]
            who = (event.get("responded_by_user") or {}).get("name") or "nobody (timed out)"
            if chosen == self.APPROVE:
                self.log.info("epochal approve_restore: approved by %s", who)
            else:
                self.log.info("epochal approve_restore: rejected by %s; nothing is restored", who)
        answer = super().execute_complete(context, event)
        shown = context["ti"].xcom_pull(task_ids=self.task_id, key=SHOWN_KEY)
        return {**answer, "ticket": shown}


def approval_text(ticket: PlanTicket, timeout: timedelta | None) -> tuple[str, str]:
    """The subject and the Markdown body a person sees before approving (plan, losses, guard)."""
    if ticket.lossy:
        subject = f"Restore job {ticket.job_id}: the plan loses something -- approve?"
        head = [f"**This restore of job `{ticket.job_id}` loses something:**", ""]
        head += [f"- {loss}" for loss in ticket.losses]
    else:
        subject = f"Restore job {ticket.job_id}: approve the plan? (auto_approve is off)"
        head = [f"This restore of job `{ticket.job_id}` loses nothing; `auto_approve` is off."]
    wait = f"within {_duration(timeout)}" if timeout is not None else "at any time"
    body = [
        *head,
        "",
        f"The job when planned: {ticket.position.describe()}. **Approve** applies exactly this plan; "
        "if the job changes first (a checkpoint completes, another restore runs, the job is busy), "
        "the restore refuses and changes nothing.",
        f"**Reject** (or no answer {wait}) changes nothing.",
        "",
        "```text",
        ticket.text,
        "```",
    ]
    return subject, "\n".join(body)


def _duration(value: timedelta) -> str:
    seconds = value.total_seconds()
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"
