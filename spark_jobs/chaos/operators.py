"""Operator actions as faults (issue 18): what people and schedulers do to a job while an epoch
runs. Each injector adds hooks to a :class:`TickPlan` at a seeded step of the epoch's DAG run; every
actor acts exactly as its command does -- it takes the job's lease (or is refused / defers), carries
its fencing token to every step -- and a refused actor changes nothing.

* ``op_concurrent_runs`` -- one or two ``epochal run`` commands start mid-epoch; sometimes the DAG
  run's lease has expired (a long pause), so one takes over and runs a whole epoch.
* ``op_restore_during_epoch`` / ``op_savepoint_during_epoch`` / ``op_retention_during_epoch`` -- the
  CLI command mid-epoch, refused while the lease is live, taking over after an expiry.
* ``op_backfill_into_the_job`` -- ``epochal backfill --new-job <the job itself>``: refused.
* ``op_zombie_holder_restore`` -- issue 18's second reproduction at the worst moment: the DAG run
  pauses past its lease's expiry with its epoch acked; a ``restore --from latest`` takes over and
  reads the latest checkpoint; the paused run wakes up and completes and notifies its epoch (a
  zombie: refused by the token check); then the restore imports what it read.
* ``op_dead_cli_holder`` -- an ``epochal run`` on another host takes the lease between DAG runs,
  triggers and dies; the next DAG run's tasks defer until the lease expires, then recover.
* ``op_airflow_restore_during_epoch`` -- an ``epochal_restore`` DAG run triggered mid-epoch defers
  until the epoch DAG run released the lease, then restores from latest.
* ``op_double_trigger`` -- the run's holder triggers a second checkpoint from the same base (a job
  configured with ``max_concurrent_checkpoints`` 2) and runs and completes it around the first:
  only the chain's base check keeps both from committing the same input.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from typing import Any

from spark_jobs.chaos.driver import STEPS, Driver, TickPlan
from spark_jobs.chaos.schedule import FaultEvent
from spark_jobs.lifecycle.backfill import backfill
from spark_jobs.lifecycle.restore import RestoreRequest, import_snapshot, load_snapshot, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime import cycle
from state_store.core.cleaner import apply_retention
from state_store.core.jobrecord import JobRecords
from state_store.core.lease import DEFAULT_TTL_MS, LeaseHeldError, release
from state_store.core.manifests import Lease

MID_EPOCH = ("trigger", "run", "complete", "notify")


def arm_operator_action(event: FaultEvent, driver: Driver, plan: TickPlan) -> None:
    rng = random.Random(event.seed)
    step = rng.choice(MID_EPOCH)
    expire = rng.random() < 0.5
    kind = event.kind
    if kind == "op_concurrent_runs":
        actors = rng.randint(1, 2)
        plan.after.setdefault(step, []).append(_cli(kind, expire, lambda d, t: _cli_runs(d, t, actors)))
    elif kind == "op_restore_during_epoch":
        plan.after.setdefault(step, []).append(_cli(kind, expire, _cli_restore))
    elif kind == "op_savepoint_during_epoch":
        plan.after.setdefault(step, []).append(_cli(kind, expire, _cli_savepoint))
    elif kind == "op_retention_during_epoch":
        plan.after.setdefault(step, []).append(_cli(kind, expire, _cli_retention))
    elif kind == "op_backfill_into_the_job":
        plan.after.setdefault(step, []).append(_backfill_into_the_job)
    elif kind == "op_zombie_holder_restore":
        plan.after.setdefault("run", []).append(_zombie_holder_restore)
    elif kind == "op_dead_cli_holder":
        plan.before.append(_dead_cli_holder)
    elif kind == "op_airflow_restore_during_epoch":
        plan.after.setdefault(step, []).append(_airflow_restore(plan))
    elif kind == "op_double_trigger":
        _double_trigger(rng, plan)
    else:  # pragma: no cover - FaultEvent validates kinds
        raise ValueError(f"operator action {kind!r} has no injector")


# -- a CLI actor --------------------------------------------------------------------------------
_CLI_COUNTER = [0]


def _cli_holder() -> str:
    _CLI_COUNTER[0] += 1
    return f"cli:chaos-operator:{_CLI_COUNTER[0]}:x"  # another host: never presumed dead


def _cli(kind: str, expire: bool, act: Any) -> Any:
    """Run ``act(driver, token)`` as a CLI command holding the job's lease (refused if busy)."""

    def hook(driver: Driver, checkpoint_id: int) -> None:
        driver.note(f"fault:{kind}")
        if expire:  # the epoch's task paused past its lease's expiry
            driver.lease_clock.advance(DEFAULT_TTL_MS + 1)

        def command() -> None:
            lease = driver.take_lease(_cli_holder(), kind)
            try:
                act(driver, lease.token)
            finally:
                release(JobRecords(driver.store, driver.job.job_id), lease)

        driver.quietly(kind, command)

    return hook


def _cli_runs(driver: Driver, token: int, actors: int) -> None:
    for _ in range(actors):
        cycle.EpochCycle(driver.job, driver.store.uri, driver.clock, lease_token=token).run_once()


def _cli_restore(driver: Driver, token: int) -> None:
    restore(driver.job, driver.store.uri, driver.clock, RestoreRequest(source="latest"), lease_token=token)


def _cli_savepoint(driver: Driver, token: int) -> None:
    cycle.abort_abandoned(driver.job, driver.store, driver.clock, "chaos-savepoint", lease_token=token)
    take_savepoint(driver.job, driver.store.uri, driver.clock, f"chaos-{token}", lease_token=token)


def _cli_retention(driver: Driver, token: int) -> None:
    cycle.coordinator_for(driver.job, driver.store, driver.clock, lease_token=token).fence()
    apply_retention(driver.store, driver.job.job_id, driver.job.checkpoint_config(), driver.clock)


def _backfill_into_the_job(driver: Driver, checkpoint_id: int) -> None:
    """``epochal backfill --job <another definition> --new-job <this job>``: refused (it has state)."""
    driver.note("fault:op_backfill_into_the_job")
    source = copy.copy(driver.job)
    source.job_id = driver.job.job_id + "-source"
    driver.quietly(
        "op_backfill_into_the_job",
        lambda: backfill(source, driver.store.uri, "unused-savepoint", driver.job.job_id),
    )


# -- the zombie holder and the restore that reads first -------------------------------------------
def _zombie_holder_restore(driver: Driver, checkpoint_id: int) -> None:
    """After the run step: the DAG run pauses with epoch n acked; its lease expires; a restore takes
    over and reads latest; the DAG run wakes up as a zombie and tries to complete and notify n with
    its old token; the restore imports what it read."""
    if checkpoint_id < 1:
        return
    driver.note("fault:op_zombie_holder_restore")
    zombie_token = driver.token
    driver.lease_clock.advance(DEFAULT_TTL_MS + 1)
    job, store, clock = driver.job, driver.store, driver.clock

    def restore_with_a_zombie_in_between() -> None:
        lease = driver.take_lease(_cli_holder(), "epochal restore")
        try:
            snapshot = load_snapshot(job, store, store.uri, "latest", clock)

            def zombie() -> None:
                result = cycle.complete_epoch(job, store, clock, checkpoint_id, lease_token=zombie_token)
                if result.status == "completed":
                    cycle.notify_epoch_complete(job, store, clock, checkpoint_id, lease_token=zombie_token)

            driver.quietly("zombie holder complete/notify", zombie)
            import_snapshot(
                job, store, clock, snapshot, RestoreRequest(source="latest"), f"chaos-restore-{lease.token}",
                lease_token=lease.token,
            )  # fmt: skip
        finally:
            release(JobRecords(store, job.job_id), lease)

    driver.quietly("op_zombie_holder_restore", restore_with_a_zombie_in_between)


# -- a dead CLI holder ----------------------------------------------------------------------------
def _dead_cli_holder(driver: Driver, tick: int) -> None:
    """Before the tick's DAG run: ``epochal run`` on another host takes the lease, triggers an
    epoch and dies holding it. The DAG run's tasks defer until the lease expires."""
    driver.note("fault:op_dead_cli_holder")

    def dies() -> None:
        lease = driver.take_lease(_cli_holder(), "epochal run")
        cycle.abort_abandoned(driver.job, driver.store, driver.clock, "dead-cli", lease_token=lease.token)
        cycle.trigger_epoch(
            driver.job, driver.store, driver.clock, request_id="dead-cli", lease_token=lease.token
        )

    driver.quietly("op_dead_cli_holder", dies)


# -- an Airflow restore DAG run ---------------------------------------------------------------------
def _airflow_restore(plan: TickPlan) -> Any:
    def hook(driver: Driver, checkpoint_id: int) -> None:
        driver.note("fault:op_airflow_restore_during_epoch")
        holder = f"airflow:epochal_restore:chaos-{driver.runs}"
        try:
            lease: Lease | None = driver.take_lease(holder, "epochal_restore.restore")
        except LeaseHeldError:
            lease = None  # the task defers; it resumes once the epoch DAG run released the lease
        if lease is not None:  # pragma: no cover - the epoch DAG run holds the lease mid-epoch
            _restore_as(driver, lease)
            return
        driver.note("info:epochal_restore deferred")
        plan.after.setdefault("retain", []).append(lambda d, _: _resume_restore(d, holder))

    return hook


def _resume_restore(driver: Driver, holder: str) -> None:
    driver.quietly(
        "epochal_restore resumed", lambda: _restore_as(driver, driver.take_lease(holder, "restore"))
    )


def _restore_as(driver: Driver, lease: Lease) -> None:
    try:
        restore(
            driver.job,
            driver.store.uri,
            driver.clock,
            RestoreRequest(source="latest"),
            lease_token=lease.token,
        )
    finally:
        release(JobRecords(driver.store, driver.job.job_id), lease)


# -- two checkpoints from one base ----------------------------------------------------------------------
def _double_trigger(rng: random.Random, plan: TickPlan) -> None:
    """After trigger: the same holder triggers a twin from the same base (max concurrent 2) and runs
    it; the twin completes before the run's own checkpoint, or after it was committed."""
    when = rng.choice(("run", "notify"))
    twin: dict[str, Any] = {}

    def trigger_twin(driver: Driver, checkpoint_id: int) -> None:
        if checkpoint_id < 1:
            return
        driver.note("fault:op_double_trigger")
        job = copy.copy(driver.job)
        config = dataclasses.replace(driver.job.checkpoint_config(), max_concurrent_checkpoints=2)
        job.checkpoint_config = lambda: config  # type: ignore[method-assign]
        token = driver.token

        def start() -> None:
            pending = cycle.trigger_epoch(
                job, driver.store, driver.clock, request_id=f"twin-{checkpoint_id}", lease_token=token
            )
            if pending is not None:
                cycle.run_epoch(job, driver.store.uri, pending.checkpoint_id, driver.clock, lease_token=token)
                twin["n"] = pending.checkpoint_id

        driver.quietly("op_double_trigger start", start)

    def finish_twin(driver: Driver, _: int) -> None:
        n = twin.pop("n", None)
        if n is None:
            return
        token = driver.token

        def finish() -> None:
            result = cycle.complete_epoch(driver.job, driver.store, driver.clock, n, lease_token=token)
            if result.status == "completed":
                cycle.notify_epoch_complete(driver.job, driver.store, driver.clock, n, lease_token=token)

        driver.quietly("op_double_trigger finish", finish)

    plan.after.setdefault("trigger", []).append(trigger_twin)
    plan.after.setdefault(when, []).append(finish_twin)


__all__ = ["STEPS", "arm_operator_action"]
