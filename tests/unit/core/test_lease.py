"""The job lease: one writer per job, a fencing token that grows with every holder, expiry, and
commit points that refuse a zombie (a holder whose lease was taken over or broken)."""

from __future__ import annotations

import threading

import pytest

from state_store.core import (
    CheckpointFailureReason,
    JobRecords,
    LeaseHeldError,
    LeaseLostError,
    ObjectNotFound,
    documents,
)
from state_store.core.lease import acquire, break_lease, release, renew
from state_store.core.manifests import JobRecord
from state_store.storage import MemoryObjectStore
from tests.unit.core.helpers import TASKS, make_job

NOW = 1_700_000_000_000


def records() -> JobRecords:
    return JobRecords(MemoryObjectStore(), "job")


def test_a_free_lease_is_granted_with_a_growing_token() -> None:
    jobs = records()
    first = acquire(jobs, "a", "epochal run", NOW)
    assert first.token == 1 and first.expires_ms == NOW + 60_000
    assert release(jobs, first)
    second = acquire(jobs, "b", "epochal restore", NOW + 1)
    assert second.token == 2
    stored = jobs.read()
    assert stored is not None and stored.lease == second and stored.fencing_token == 2


def test_a_held_lease_is_refused_naming_the_holder_since_when_and_the_remedy() -> None:
    jobs = records()
    acquire(jobs, "cli:host:1", "epochal run", NOW)
    with pytest.raises(LeaseHeldError) as err:
        acquire(jobs, "cli:host:2", "epochal restore", NOW + 5_000)
    text = str(err.value)
    assert "\n" not in text
    assert "job job is busy: `epochal run` (holder cli:host:1, token 1)" in text
    assert "since 2023-11-14 22:13:20 UTC" in text and "expires in 55 s" in text
    assert "--wait" in text and "epochal lease break --job job" in text


def test_an_expired_lease_is_taken_over_and_the_old_holder_is_fenced() -> None:
    jobs = records()
    old = acquire(jobs, "a", "epochal run", NOW, ttl_ms=1_000)
    new = acquire(jobs, "b", "epochal run", NOW + 1_001)
    assert new.token == old.token + 1
    with pytest.raises(LeaseLostError, match=r"lease token 1: `epochal run` \(holder b, token 2\) holds it"):
        renew(jobs, old, NOW + 1_002)
    assert not release(jobs, old)  # a zombie's release changes nothing
    assert jobs.read().lease == new  # type: ignore[union-attr]


def test_heartbeats_keep_a_lease_past_its_first_expiry() -> None:
    jobs = records()
    lease = acquire(jobs, "a", "epochal run", NOW, ttl_ms=1_000)
    for step in range(1, 5):
        lease = renew(jobs, lease, NOW + step * 900, ttl_ms=1_000)
    with pytest.raises(LeaseHeldError):
        acquire(jobs, "b", "epochal run", NOW + 4_000)


def test_the_same_holder_reacquires_with_a_new_token_fencing_its_earlier_try() -> None:
    jobs = records()
    try1 = acquire(jobs, "airflow:epochal_job:run1", "run_epoch", NOW)
    try2 = acquire(jobs, "airflow:epochal_job:run1", "run_epoch", NOW + 10)
    assert try2.token == try1.token + 1
    with pytest.raises(LeaseLostError):
        renew(jobs, try1, NOW + 20)


def test_a_takeover_rule_lets_a_new_run_of_the_same_dag_replace_a_dead_one() -> None:
    jobs = records()
    acquire(jobs, "airflow:epochal_job:run1", "trigger_checkpoint", NOW)
    same_dag = acquire(
        jobs,
        "airflow:epochal_job:run2",
        "trigger_checkpoint",
        NOW + 1,
        takeover=lambda held: held.holder.startswith("airflow:epochal_job:"),
    )
    assert same_dag.token == 2
    with pytest.raises(LeaseHeldError):
        acquire(jobs, "airflow:epochal_restore:r1", "restore", NOW + 2, takeover=lambda held: False)


def test_break_frees_the_lease_and_fences_the_broken_holder() -> None:
    jobs = records()
    lease = acquire(jobs, "a", "epochal run", NOW)
    assert break_lease(jobs) == lease
    with pytest.raises(LeaseLostError, match="nobody holds it now"):
        renew(jobs, lease, NOW + 1)
    assert break_lease(jobs) is None  # free already: only the token moves
    assert acquire(jobs, "b", "epochal run", NOW + 2).token == 4
    with pytest.raises(ObjectNotFound, match=r"job job has no job record .* never ran here"):
        break_lease(records())


def test_of_many_concurrent_acquirers_exactly_one_wins() -> None:
    jobs = records()
    jobs.ensure(128, NOW)
    won: list[str] = []
    lost: list[str] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        try:
            acquire(jobs, f"actor-{i}", "epochal run", NOW)
            won.append(f"actor-{i}")
        except LeaseHeldError:
            lost.append(f"actor-{i}")

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7
    assert jobs.read().lease.holder == won[0]  # type: ignore[union-attr]


def test_a_zombie_coordinator_cannot_commit_after_a_takeover() -> None:
    """The holder pauses past expiry with its epoch fully acked; a new holder takes over. The
    zombie's commit is refused and writes nothing -- not even an abort."""
    job = make_job()
    jobs = JobRecords(job.store, job.job_id)
    old = acquire(jobs, "a", "epochal run", NOW, ttl_ms=1_000)
    zombie = job.new_coordinator(lease_token=old.token)
    n = zombie.trigger(list(TASKS)).checkpoint_id
    zombie.start_attempt(n)
    job.ack_all(n)
    new = acquire(jobs, "b", "epochal run", NOW + 2_000)
    with pytest.raises(LeaseLostError):
        zombie.complete(n)
    assert zombie.decision(n) is None
    assert jobs.read().head is None  # type: ignore[union-attr]
    holder = job.new_coordinator(lease_token=new.token)
    holder.failover()
    assert holder.decision(n).reason == CheckpointFailureReason.JOB_FAILOVER.name  # type: ignore[union-attr]


def test_a_commit_without_a_lease_is_refused_while_somebody_holds_it() -> None:
    job = make_job()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack_all(n)
    acquire(JobRecords(job.store, job.job_id), "a", "epochal run", NOW)
    with pytest.raises(LeaseLostError, match="refused a change made under no lease"):
        job.coordinator.complete(n)
    with pytest.raises(LeaseLostError):
        job.coordinator.start_attempt(n)
    assert job.coordinator.decision(n) is None


def test_the_lease_lives_in_the_checksummed_job_record() -> None:
    jobs = records()
    acquire(jobs, "a", "epochal run", NOW)
    record = documents.read(jobs.store, jobs.layout.job_record, JobRecord)
    assert record.lease is not None and record.chained and record.head is None


def test_the_takeover_rule_presumes_dead_only_what_it_can_see_is_dead() -> None:
    import os
    import subprocess
    import sys

    from state_store.core.manifests import Lease
    from state_store.lease_keeper import holder_id, takeover_rule

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)
    mine = holder_id("cli")
    host, _, rand, ns = mine.split(":")[1:]

    def lease(holder: str) -> Lease:
        return Lease(holder, 1, "epochal run", NOW, NOW, NOW + 60_000)

    may_take = takeover_rule(mine)
    assert may_take(lease(f"cli:{host}:{dead_pid}:{rand}:{ns}"))  # crashed, here: taken at once
    assert not may_take(lease(f"cli:{host}:{os.getpid()}:{rand}:{ns}"))  # alive
    assert not may_take(lease(f"cli:{host}:{dead_pid}:{rand}:other-namespace"))  # another container
    assert not may_take(lease(f"cli:otherhost:{dead_pid}:{rand}:{ns}"))  # another machine
    run = takeover_rule("airflow:epochal_job:run2")
    assert run(lease("airflow:epochal_job:run1"))  # a previous run of the same DAG
    assert not run(lease("airflow:epochal_restore:r1"))  # another DAG: wait for it
    assert run(lease(f"cli:{host}:{dead_pid}:x:{ns}"))  # a crashed CLI command: dead for anybody
