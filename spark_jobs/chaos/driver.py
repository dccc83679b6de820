"""The DAG-run driver: one epoch (tick) is one or more Airflow-like DAG runs of the cycle tasks

    trigger (abort_abandoned + trigger_epoch) >> run_epoch >> complete >> notify >> retention

each task a call of ``spark_jobs.runtime.cycle`` with the in-process executor, exactly as the
operators call them. A task that raises (a simulated process kill -- ``SimulatedCrash``, no
cleanup code runs -- or a store error) is either retried in the same DAG run (same run id: a new
attempt of the same checkpoint) or fails the run (the next DAG run gets a new run id and aborts
the abandoned checkpoint), chosen by the schedule's seeded ``retry_bias``. A ``complete`` that does
not complete the checkpoint fails the run.

Leases: every task first (re)acquires the job's lease for its DAG run, exactly as the Airflow
operators do (holder ``airflow:epochal_<job>:<run id>``; a new run of the same DAG takes over from
a dead one), and passes its fencing token to every step; the last task releases it. Lease expiry
runs on ``lease_clock``, the actors' wall clock, separate from the job's event-time clock, so
faults can let a lease expire without moving the input.

Invariants: every action is followed by ``monitor()`` (the invariant checks that hold at any
instant); a tick gives up after ``max_actions`` (the checker then reports the job stuck); kill
switches armed through ``EPOCHAL_FAULT`` are cleared as soon as they fire.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.chaos.store import ChaosStore
from spark_jobs.runtime import cycle
from spark_jobs.runtime.plan import EpochPlan
from state_store.clocks import ManualClock
from state_store.core.coordinator import Gate
from state_store.core.jobrecord import JobRecords
from state_store.core.lease import DEFAULT_TTL_MS, LeaseHeldError, acquire, release
from state_store.core.manifests import Lease
from state_store.core.ports import NO_KILL, KillSwitch
from state_store.faults import KillAt, SimulatedCrash, parse_fault
from state_store.lease_keeper import takeover_rule

Hook = Callable[["Driver", int], None]
_STORE_KINDS = {
    "error": "s3_500",
    "throttle": "s3_503_slowdown",
    "timeout": "s3_timeout",
    "latency": "s3_latency",
    "connection_reset": "s3_connection_reset",
    "bitflip": "bitflip_state",
    "restore_crash": "kill_restore",
}


def fired_kind(kind: str, key: str) -> str:
    """The schedule's name for a fault the store reports as ``kind`` on ``key``."""
    if kind == "torn":
        return "torn_state" if key.endswith((".arrow", ".parquet")) else "torn_manifest"
    return _STORE_KINDS.get(kind, kind)


STEPS = ("trigger", "run", "complete", "notify", "retain")


@dataclass
class TickPlan:
    """What the armed faults of one tick ask the driver to do (filled by ``faults.arm``)."""

    kill_spec: str | None = None  # EPOCHAL_FAULT value, cleared once it fires
    gate_failures: int = 0  # complete calls whose validation gate fails
    before: list[Hook] = field(default_factory=list)  # before the first DAG run
    after: dict[str, list[Hook]] = field(default_factory=dict)  # after a successful step
    deferred: list[Hook] = field(default_factory=list)  # next tick, after its "complete" step


@dataclass
class Event:
    seq: int
    run: int
    what: str  # "fault:<kind>", "completed:<id>", "failure:<text>"


class Driver:
    def __init__(self, job: Job, store: ChaosStore, clock: ManualClock, rng: random.Random, retry_bias: float,
                 monitor: Callable[[], None] = lambda: None, max_actions: int = 60) -> None:  # fmt: skip
        self.job, self.store, self.clock, self.rng = job, store, clock, rng
        self.retry_bias, self.monitor, self.max_actions = retry_bias, monitor, max_actions
        self.events: list[Event] = []
        self.seq = 0
        self.runs = 0
        self.plan = TickPlan()
        self.stuck_ticks: list[int] = []
        self.before_gate: Callable[[], Any] | None = None  # snapshot taken before a gated complete
        self.after_gate: Callable[[int, Any], None] | None = None  # check after it aborted
        self.lease_clock = ManualClock(clock.now_ms())  # the actors' wall clock (lease expiry)
        self.lease: Lease | None = None  # the lease the current DAG run's last task took

    # -- the job's lease ----------------------------------------------------------------------
    def holder(self, run_id: str) -> str:
        return f"airflow:epochal_{self.job.job_id}:{run_id}"

    def take_lease(self, holder: str, command: str = "chaos task") -> Lease:
        """(Re)acquire the job's lease as ``holder`` on the lease clock (LeaseHeldError if busy)."""
        return acquire(
            JobRecords(self.store, self.job.job_id),
            holder,
            command,
            self.lease_clock.now_ms(),
            ttl_ms=DEFAULT_TTL_MS,
            max_parallelism=self.job.max_parallelism,
            takeover=takeover_rule(holder),
        )

    def take_lease_or_defer(self, holder: str, command: str) -> Lease:
        """As an Airflow task does: a busy job defers the task until the lease can be taken (here:
        the lease clock moves past the holder's expiry, as the triggerer's waiting would)."""
        try:
            return self.take_lease(holder, command)
        except LeaseHeldError as busy:
            self.note(f"info:deferred until the lease expires ({busy.lease.holder})")
            self.lease_clock.advance(max(0, busy.lease.expires_ms - self.lease_clock.now_ms()) + 1)
            return self.take_lease(holder, command)

    @property
    def token(self) -> int | None:
        """The fencing token of the current DAG run's newest task."""
        return self.lease.token if self.lease is not None else None

    def release_lease(self) -> None:
        if self.lease is not None:
            release(JobRecords(self.store, self.job.job_id), self.lease)
            self.lease = None

    # -- bookkeeping ------------------------------------------------------------------------
    def note(self, what: str) -> None:
        self.seq += 1
        self.events.append(Event(self.seq, self.runs, what))

    def note_fired(self) -> None:
        for _, key, kind in self.store.drain_fired():
            self.note(f"fault:{fired_kind(kind, key)}")

    def new_run_id(self, tick: int) -> str:
        self.runs += 1
        return f"tick{tick}-run{self.runs}"

    # -- helpers the faults use -------------------------------------------------------------
    def plan_for(self, checkpoint_id: int, attempt: int) -> EpochPlan:
        """The EpochPlan ``run_epoch`` builds for ``attempt`` of checkpoint n."""
        coordinator = cycle.coordinator_for(self.job, self.store, self.clock)
        pending = coordinator.pending_record(checkpoint_id)
        job = cycle.with_parallelism(self.job, pending.parallelism)
        return EpochPlan.for_attempt(job, self.store.uri, pending, attempt)

    def quietly(self, what: str, action: Callable[[], Any]) -> Any:
        """Run a fault's own action (a zombie, a racing coordinator); its failure is expected."""
        try:
            return action()
        except (SimulatedCrash, Exception) as exc:
            self.note(f"info:{what} failed: {type(exc).__name__}")
            return None
        finally:
            self.monitor()

    # -- one step ---------------------------------------------------------------------------
    def _kill(self) -> KillSwitch:
        if self.plan.kill_spec is None:
            return NO_KILL
        point, checkpoint_id = parse_fault(self.plan.kill_spec)
        return KillAt(point, checkpoint_id)

    def step(self, name: str, run_id: str, checkpoint_id: int | None, gate: Gate | None) -> Any:
        job, store, clock = self.job, self.store, self.clock
        kill = self._kill()
        try:
            self.lease = self.take_lease_or_defer(self.holder(run_id), name)
            token = self.lease.token
            if name == "trigger":
                cycle.abort_abandoned(job, store, clock, run_id, lease_token=token)
                return cycle.trigger_epoch(job, store, clock, request_id=run_id, kill=kill, lease_token=token)
            assert checkpoint_id is not None
            if name == "run":
                return cycle.run_epoch(job, store.uri, checkpoint_id, clock, kill=kill, lease_token=token)
            if name == "complete":
                return cycle.complete_epoch(
                    job, store, clock, checkpoint_id, gate=gate, kill=kill, lease_token=token
                )
            if name == "notify":
                return cycle.notify_epoch_complete(
                    job, store, clock, checkpoint_id, kill=kill, lease_token=token
                )
            plan = cycle.apply_job_retention(job, store, clock, kill=kill, lease_token=token)
            self.release_lease()  # the DAG run's last task
            return plan
        except SimulatedCrash as crash:
            if self.plan.kill_spec is not None and crash.point == self.plan.kill_spec.split("@")[0]:
                self.plan.kill_spec = None
                self.note(f"fault:kill:{crash.point}")
            raise

    def _gate(self) -> Gate | None:
        if self.plan.gate_failures <= 0:
            return None

        def failing(metadata: Any) -> str:
            self.plan.gate_failures -= 1
            self.note("fault:gx_failure")
            return (
                "Great Expectations suite failed: expect_column_values_to_not_be_null(state.value) (injected)"
            )

        return failing

    # -- one tick ---------------------------------------------------------------------------
    def tick(self, tick: int, plan: TickPlan) -> str:
        """Run DAG runs until the tick's input is checkpointed (or skipped); see module docstring."""
        self.plan = plan
        for hook in plan.before:
            hook(self, tick)
        run_id, step, tries, checkpoint_id = self.new_run_id(tick), 0, 0, None
        for _ in range(self.max_actions):
            name = STEPS[step]
            gated = name == "complete" and self.plan.gate_failures > 0
            snapshot = self.before_gate() if gated and self.before_gate else None
            try:
                result = self.step(name, run_id, checkpoint_id, self._gate() if name == "complete" else None)
                failed = None
                if gated and self.after_gate and checkpoint_id is not None and result.status == "aborted":
                    self.after_gate(checkpoint_id, snapshot)
                if name == "trigger":
                    if result is None:
                        self._after(name, tick)
                        return "skipped"
                    checkpoint_id = result.checkpoint_id
                if name == "complete" and result.status != "completed":
                    failed = f"checkpoint {checkpoint_id} {result.status}: {result.message}"
            except (SimulatedCrash, Exception) as exc:
                failed = f"{name}: {type(exc).__name__}: {str(exc)[:160]}"
                retry = tries < 2 and self.rng.random() < self.retry_bias
            else:
                retry = False
            self.note_fired()
            self.monitor()
            if failed is None:
                self._after(name, tick, checkpoint_id)
                if step == len(STEPS) - 1:
                    return "completed"
                step, tries = step + 1, 0
                continue
            self.note(f"failure:{failed}")
            if retry and name != "complete":
                tries += 1
            else:
                run_id, step, tries, checkpoint_id = self.new_run_id(tick), 0, 0, None
        self.stuck_ticks.append(tick)
        self.note(f"failure:tick {tick} stuck after {self.max_actions} actions")
        return "stuck"

    def _after(self, name: str, tick: int, checkpoint_id: int | None = None) -> None:
        for hook in self.plan.after.pop(name, []):
            hook(self, checkpoint_id if checkpoint_id is not None else -1)
        self.note_fired()
