"""Named fault injectors: each turns one :class:`FaultEvent` into armed store faults, a kill switch
or scripted actions of a :class:`TickPlan`. Every random choice comes from the event's own seed.

* ``kill:<point>`` -- the process dies at kill point ``<point>`` (``SimulatedCrash``: an exception
  no ``except Exception`` can catch, so no cleanup code runs -- as after SIGKILL).
* ``kill_restore`` / ``kill_restore_twice`` -- the process dies while reading its restore base,
  once, or again in the restarted attempt's restore.
* ``s3_500``, ``s3_503_slowdown``, ``s3_timeout``, ``s3_connection_reset``, ``s3_latency`` -- S3
  errors and latency on random operations and keys; ``lost_response`` -- a write that succeeded
  but whose response was lost; ``torn_manifest`` / ``torn_state`` -- half-written documents or
  state files; ``bitflip_state`` -- a silently corrupted state file; ``disk_full`` -- ENOSPC.
* ``duplicate_ack`` -- the attempt's tasks run again (a re-run Spark task) and ack twice;
  ``late_ack`` -- they run again after the decision; ``zombie_attempt`` -- an attempt registered
  before the retry resumes later (before completion, after it, or in the next epoch);
  ``zombie_coordinator`` -- a coordinator that decided COMPLETE and died resumes one epoch later
  and finishes its (stale) completion; ``racing_coordinators`` -- a second DAG run of the same job
  races the first; ``gx_failure`` -- the validation gate fails after the sinks pre-committed.
* ``op_*`` -- operator actions (``spark_jobs.chaos.operators``): other commands, dead and zombie
  lease holders, an Airflow restore run during an epoch run.
"""

from __future__ import annotations

import functools
import random
from typing import Any

from spark_jobs.chaos.driver import Driver, TickPlan
from spark_jobs.chaos.schedule import KILL_PREFIX, FaultEvent
from spark_jobs.runtime import cycle
from spark_jobs.runtime.executors import run_in_process
from state_store.testing import Fault

READS = frozenset({"get", "head", "list"})
WRITES = frozenset({"put", "put_if_absent", "put_if_match"})
ALL_OPS = READS | WRITES | {"delete"}
DOC_GLOBS = ("*/_metadata.json", "*/acks/*", "*/_pending.json", "*/_decision.json", "*/LATEST",
             "*/_commits/*", "*/attempts/*", "*/_job.json")  # fmt: skip
# Torn writes break the port's atomic visibility (S3 and the local store never tear a write). The
# protocol survives torn copies of these documents; a torn ``_pending.json``, ``_decision.json`` or
# ``_job.json`` stops the job with an error naming the file (tests/chaos/test_targeted.py), and so
# does a torn ``_metadata.json`` of the latest checkpoint since issue 18 (a damaged latest checkpoint
# is refused, never skipped; tests/unit/runtime/test_damaged_metadata.py): so it is not drawn here.
TORN_DOC_GLOBS = ("*/acks/*", "*/LATEST", "*/_commits/*", "*/attempts/*")
DATA_GLOBS = ("*/shared/*", "*/state/*", "*/sinks/*.parquet")
STATE_GLOBS = ("*/shared/*", "*/shared/dedup/*", "*/shared/user-activity/*", "*/shared/page-counts/*")
ANY_GLOBS = ("*", *DOC_GLOBS, *DATA_GLOBS)


def arm(event: FaultEvent, driver: Driver, plan: TickPlan) -> None:
    """Arm ``event`` for the coming tick (store faults are disarmed by the runner after it)."""
    rng = random.Random(event.seed)
    kind = event.kind
    store = driver.store
    if kind.startswith(KILL_PREFIX):
        plan.kill_spec = kind[len(KILL_PREFIX) :]
    elif kind in ("s3_500", "s3_503_slowdown", "s3_timeout"):
        fault_kind = {"s3_500": "error", "s3_503_slowdown": "throttle", "s3_timeout": "timeout"}[kind]
        ops = frozenset(rng.sample(sorted(ALL_OPS), rng.randint(1, len(ALL_OPS))))
        store.arm(Fault(fault_kind, ops, rng.choice(ANY_GLOBS), times=rng.randint(1, 3), probability=0.5))
    elif kind == "s3_connection_reset":
        store.arm_reset(rng.choice(ANY_GLOBS), rng.randint(1, 3))
    elif kind == "s3_latency":
        store.arm(Fault("latency", ALL_OPS, rng.choice(ANY_GLOBS), times=rng.randint(1, 20), latency_s=0.001))
    elif kind == "lost_response":
        store.arm(Fault("lost_response", WRITES, rng.choice(DOC_GLOBS + DATA_GLOBS), times=rng.randint(1, 2)))
    elif kind == "torn_manifest":
        store.arm(Fault("torn", WRITES, rng.choice(TORN_DOC_GLOBS), times=1))
    elif kind == "torn_state":
        store.arm(Fault("torn", WRITES, rng.choice(DATA_GLOBS), times=1))
    elif kind == "bitflip_state":
        store.arm(Fault("bitflip", WRITES, rng.choice(STATE_GLOBS), times=1))
    elif kind == "disk_full":
        store.arm(Fault("disk_full", WRITES, rng.choice(DOC_GLOBS + DATA_GLOBS), times=rng.randint(1, 2)))
    elif kind in ("kill_restore", "kill_restore_twice"):
        store.arm_restore_crash(rng.choice(STATE_GLOBS), 2 if kind == "kill_restore_twice" else 1, kind)
    elif kind == "gx_failure":
        plan.gate_failures += 1
    elif kind == "duplicate_ack":
        plan.after.setdefault("run", []).append(_rerun_current_attempt("duplicate_ack"))
    elif kind == "late_ack":
        plan.after.setdefault("complete", []).append(_rerun_current_attempt("late_ack"))
    elif kind == "zombie_attempt":
        _zombie_attempt(rng, plan)
    elif kind == "zombie_coordinator":
        _zombie_coordinator(plan)
    elif kind == "racing_coordinators":
        _racing(rng, plan)
    elif kind.startswith("op_"):
        from spark_jobs.chaos.operators import arm_operator_action

        arm_operator_action(event, driver, plan)
    else:  # pragma: no cover - FaultEvent validates kinds
        raise ValueError(f"fault kind {kind!r} has no injector")


def _rerun_current_attempt(kind: str) -> Any:
    def hook(driver: Driver, checkpoint_id: int) -> None:
        if checkpoint_id < 1:
            return
        attempt = cycle.coordinator_for(driver.job, driver.store, driver.clock).current_attempt(checkpoint_id)
        driver.note(f"fault:{kind}")
        driver.quietly(kind, lambda: run_in_process(driver.plan_for(checkpoint_id, attempt)))

    return hook


def _zombie_attempt(rng: random.Random, plan: TickPlan) -> None:
    """After trigger, an attempt is registered and hangs; the retry (the normal run step) starts a
    newer attempt; the zombie resumes before completion, after it, or in the next epoch."""
    when = rng.choice(("run", "complete", "deferred"))
    zombie: dict[str, Any] = {}

    def register(driver: Driver, checkpoint_id: int) -> None:
        if checkpoint_id < 1:
            return
        # an earlier try of the run task: it held the run's lease when it registered
        coordinator = cycle.coordinator_for(driver.job, driver.store, driver.clock, lease_token=driver.token)
        attempt = driver.quietly("zombie_attempt register", lambda: coordinator.start_attempt(checkpoint_id))
        if attempt is not None:
            zombie["plan"] = driver.plan_for(checkpoint_id, attempt.attempt)

    def resume(driver: Driver, _: int) -> None:
        if "plan" in zombie:
            driver.note("fault:zombie_attempt")
            driver.quietly("zombie_attempt", lambda: run_in_process(zombie.pop("plan")))

    plan.after.setdefault("trigger", []).append(register)
    if when == "deferred":
        plan.deferred.append(resume)  # after the next epoch's checkpoint completed
    else:
        plan.after.setdefault(when, []).append(resume)


def _zombie_coordinator(plan: TickPlan) -> None:
    """A coordinator decides COMPLETE and dies before writing ``_metadata.json``; the next DAG run
    rolls the checkpoint forward; one epoch later the old coordinator resumes its completion."""
    plan.kill_spec = plan.kill_spec or "before_metadata"
    stale: list[tuple[int, int | None]] = []

    def remember(driver: Driver, checkpoint_id: int) -> None:
        if checkpoint_id >= 1:
            stale.append((checkpoint_id, driver.token))  # the lease it held (it is a zombie later)

    def resume(driver: Driver, _: int) -> None:
        for checkpoint_id, token in stale:
            driver.note("fault:zombie_coordinator")
            driver.quietly("zombie_coordinator", functools.partial(
                cycle.complete_epoch, driver.job, driver.store, driver.clock, checkpoint_id, lease_token=token
            ))  # fmt: skip

    plan.after.setdefault("trigger", []).append(remember)
    plan.deferred.append(resume)  # after the next epoch's checkpoint completed, before its retention


def _racing(rng: random.Random, plan: TickPlan) -> None:
    """DAG run A triggers and runs epoch n; DAG run B of the same job starts (aborting A's
    checkpoint as abandoned) while A goes on to complete, notify and retain at a seeded point."""
    where = rng.choice(("before", "trigger", "run", "complete"))
    racer: dict[str, Any] = {}

    def start_a(driver: Driver, tick: int) -> None:
        run_id = driver.new_run_id(tick)
        driver.note("fault:racing_coordinators")

        def trigger_and_run() -> None:
            token = driver.take_lease(driver.holder(run_id), "racing A").token
            racer["token"] = token
            cycle.abort_abandoned(driver.job, driver.store, driver.clock, run_id, lease_token=token)
            pending = cycle.trigger_epoch(
                driver.job, driver.store, driver.clock, request_id=run_id, lease_token=token
            )
            if pending is not None:
                racer["n"] = pending.checkpoint_id
                cycle.run_epoch(
                    driver.job, driver.store.uri, pending.checkpoint_id, driver.clock, lease_token=token
                )

        driver.quietly("racing A trigger/run", trigger_and_run)
        if where == "before":
            finish_a(driver, -1)

    def finish_a(driver: Driver, _: int) -> None:
        n, token = racer.pop("n", None), racer.get("token")
        if n is None:
            return
        job, store, clock = driver.job, driver.store, driver.clock

        def complete_notify_retain() -> None:
            result = cycle.complete_epoch(job, store, clock, n, lease_token=token)
            if result.status == "completed":
                cycle.notify_epoch_complete(job, store, clock, n, lease_token=token)
            cycle.apply_job_retention(job, store, clock, lease_token=token)

        driver.quietly("racing A complete", complete_notify_retain)

    plan.before.append(start_a)
    if where != "before":
        plan.after.setdefault(where, []).append(finish_a)
