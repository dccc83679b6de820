"""Targeted fault scenarios that need real components or exact placement: real process exits,
SeaweedFS stopped and restarted mid-epoch, ENOSPC from the real local store, a real Great
Expectations failure after pre-commit, restore killed twice, torn protocol documents."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import state_store.storage.local as local_module
from spark_jobs.chaos.observe import committed_rows, latest_pointer
from spark_jobs.chaos.runner import SINK, ChaosConfig, reference, run_schedule
from spark_jobs.chaos.schedule import FaultEvent, Schedule
from spark_jobs.lifecycle.checks import validate_snapshot_of
from spark_jobs.lifecycle.snapshots import from_metadata
from spark_jobs.runtime import cycle
from spark_jobs.sinks.commit_log import CommitLog
from state_store.clocks import ManualClock
from state_store.core import killpoints
from state_store.core.checksums import put_checked
from state_store.core.ports import ObjectStore, StorageFullError
from state_store.storage import open_store
from state_store.storage.local import LocalObjectStore
from state_store.testing import Fault, SimulatedCrash

CONFIG = ChaosConfig()
EPOCHAL = [sys.executable, "-m", "spark_jobs.cli"]
ROOT = Path(__file__).resolve().parents[2]


# -- real process exits (os._exit(137) at the kill point, as SIGKILL: no cleanup, no flush) -------
def _run(store: str, epochs: int, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    args = [*EPOCHAL, "run", "--job", "clickstream", "--store", store, "--epochs", str(epochs)]
    args += ["--executor", "local", "--time-step-ms", "10000"]
    return subprocess.run(
        args, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300
    )


def _windows(store: str) -> list[Any]:
    """Committed windows without ``user_total`` (a running total in processing order: the restarted
    process re-runs epoch 2 at epoch 3's time, so its cut -- not its input -- differs)."""
    rows = committed_rows(open_store(store), "clickstream", SINK)
    return sorted(((r[0], r[1], r[2], r[3], r[4]) for r in rows), key=repr)


@pytest.fixture(scope="module")
def fault_free_output(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The same three epochs in this process (the code path of ``epochal run``)."""
    from spark_jobs.cli import main

    store = (tmp_path_factory.mktemp("ref") / "store").as_uri()
    args = ["run", "--job", "clickstream", "--store", store, "--epochs", "3", "--executor", "local"]
    assert main([*args, "--time-step-ms", "10000"]) == 0
    return _windows(store)


@pytest.mark.parametrize("point", [killpoints.AFTER_STATE_UPLOAD, killpoints.MID_SINK_COMMIT])
def test_a_real_process_exit_at_a_kill_point_then_restart_gives_the_fault_free_output(
    point: str, tmp_path: Path, fault_free_output: list[Any]
) -> None:
    store = (tmp_path / "store").as_uri()
    died = _run(store, 3, {"EPOCHAL_FAULT": f"{point}@2", "EPOCHAL_FAULT_MODE": "exit"})
    assert died.returncode == 137, died.stderr[-500:]
    resumed = _run(store, 1)  # the restarted process: failover, then epoch 2's input again
    assert resumed.returncode == 0, resumed.stderr[-500:]
    windows = _windows(store)
    assert len(set(windows)) == len(windows), "a window was committed twice"
    assert windows == fault_free_output


# -- SeaweedFS stopped and restarted in the middle of an epoch --------------------------------------
class StopsServerOnce:
    """Passes everything to the S3 store; on the first state upload it stops the real server
    (keeping its data), lets the request fail against the dead endpoint, restarts the server on the
    same ports and data, and re-raises: the epoch saw its store vanish mid-upload."""

    def __init__(self, inner: ObjectStore, server: Any) -> None:
        self.inner, self.server, self.done, self.errors = inner, server, False, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _maybe_stop(self, key: str, call: Any) -> Any:
        if self.done or "/shared/" not in key:
            return call()
        self.done = True
        self.server.stop(keep_data=True, grace_s=2)
        try:
            return call()
        except Exception as exc:
            self.errors.append(exc)
            raise
        finally:
            self.server.start()

    def put(self, key: str, data: bytes) -> str:
        return self._maybe_stop(key, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self._maybe_stop(key, lambda: self.inner.put_if_absent(key, data))

    def put_verified(self, key: str, data: bytes, checksum: str, *, create_only: bool = False) -> str:
        """(State files are written through the store's verified upload, ``checksums.put_checked``.)"""
        return self._maybe_stop(
            key, lambda: put_checked(self.inner, key, data, checksum, create_only=create_only)
        )


@pytest.mark.timeout(300)
def test_seaweedfs_stopped_and_restarted_mid_epoch_keeps_every_invariant() -> None:
    from state_store.testing.seaweedfs import SeaweedFSServer

    config = CONFIG  # a real store stamps files with the wall clock: the harness allows for it
    server = SeaweedFSServer().start()
    try:
        inner = server.make_store("chaos", "mid-epoch", max_attempts=2, connect_timeout=1, read_timeout=5)
        wrapper = StopsServerOnce(inner, server)
        schedule = Schedule(3, config.ticks, (FaultEvent(1, "s3_latency", 3),), retry_bias=1.0)
        result = run_schedule(schedule, config, inner=wrapper)  # type: ignore[arg-type]
        assert wrapper.done and wrapper.errors, "the server was never stopped mid-upload"
        assert "failed" in str(wrapper.errors[0]) or "connect" in str(wrapper.errors[0]).lower()
        assert not result.violations, [str(v) for v in result.violations]
        assert any(n.startswith("failure:run") for n in result.notes), result.notes
    finally:
        server.stop(grace_s=1)


# -- disk full on the real local store ------------------------------------------------------------
def test_disk_full_on_the_local_store_aborts_cleanly_and_the_next_run_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    uri = root.as_uri()
    job, clock = CONFIG.job(), ManualClock(CONFIG.start_ms)
    clock.advance(CONFIG.step_ms)
    assert cycle.run_cycle(job, uri, clock).status == "completed"
    before = latest_pointer(open_store(uri), job.job_id)
    rows_before = committed_rows(open_store(uri), job.job_id, SINK)

    real_fsync, calls = os.fsync, {"n": 0}

    def full_disk(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] >= 3:  # a few writes succeed, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(local_module.os, "fsync", full_disk)
    clock.advance(CONFIG.step_ms)
    with pytest.raises(StorageFullError, match=r"no space left writing .* free disk space and retry"):
        cycle.run_cycle(job, uri, clock, request_id="run-2")
    monkeypatch.setattr(local_module.os, "fsync", real_fsync)

    store = LocalObjectStore(str(root))
    assert latest_pointer(store, job.job_id) == before  # LATEST unchanged
    assert committed_rows(store, job.job_id, SINK) == rows_before  # nothing half-committed
    leftovers = list((root / ".epochal-internal" / "tmp").glob("*"))
    assert leftovers == [], f"temp files left behind: {leftovers}"
    report = cycle.run_cycle(job, uri, clock)  # the restarted job: failover aborts the dead attempt
    assert report.status == "completed"
    ref = reference(CONFIG)
    assert sorted(committed_rows(store, job.job_id, SINK), key=repr) == sorted(ref.rows_by_tick[1], key=repr)


# -- a real Great Expectations failure after the sinks pre-committed --------------------------------
def test_a_great_expectations_failure_after_pre_commit_aborts_the_sink_and_keeps_latest() -> None:
    clock = ManualClock(CONFIG.start_ms)
    uri = f"memory://gx-{os.getpid()}-{id(clock)}"
    store = open_store(uri)
    job = CONFIG.job()
    clock.advance(CONFIG.step_ms)
    assert cycle.run_cycle(job, uri, clock).status == "completed"
    latest_before = latest_pointer(store, job.job_id)
    job.expectations = {
        "user-activity": [
            {
                "type": "expect_column_values_to_be_in_set",
                "kwargs": {"column": "state", "value_set": ["none"]},
            }
        ]
    }

    def gx_gate(metadata: Any) -> str | None:
        snapshot = from_metadata(store, metadata, job.max_parallelism, "gate")
        result = validate_snapshot_of(job, snapshot)
        return None if result.passed else result.summary_line()

    clock.advance(CONFIG.step_ms)
    pending = cycle.trigger_epoch(job, store, clock, request_id="run-2")
    assert pending is not None
    n = pending.checkpoint_id
    cycle.run_epoch(job, uri, n, clock)
    staged = list(store.list(CommitLog(store, job.job_id, SINK).layout.staged_prefix))
    assert any(f"txn-{n:010d}" in i.key for i in staged), "the sink pre-committed nothing"
    result = cycle.complete_epoch(job, store, clock, n, gate=gx_gate)
    assert result.status == "aborted" and result.reason is not None
    assert result.reason.name == "VALIDATION_FAILED"
    assert "expect_column_values_to_be_in_set" in result.message
    cycle.notify_epoch_complete(job, store, clock, n)
    assert latest_pointer(store, job.job_id) == latest_before
    assert n not in CommitLog(store, job.job_id, SINK).committed_ids()
    # after the grace period the aborted transaction's staged files are gone
    clock.advance(job.checkpoint_config().orphan_grace_ms + 1)
    cycle.apply_job_retention(job, store, clock)
    assert not [i.key for i in store.list(f"{job.job_id}/sinks/") if f"txn-{n:010d}" in i.key]


# -- restore killed, and killed again in the restarted attempt's restore ---------------------------
@pytest.mark.parametrize("retry_bias", [0.0, 1.0])
def test_kill_during_restore_and_during_the_second_restore(retry_bias: float) -> None:
    schedule = Schedule(5, CONFIG.ticks, (FaultEvent(1, "kill_restore_twice", 5),), retry_bias)
    result = run_schedule(schedule, CONFIG)
    assert result.fired["kill_restore_twice"] == 2, result.fired
    assert not result.violations, [str(v) for v in result.violations]


# -- torn protocol documents: the job stops loudly, nothing wrong becomes visible -------------------
@pytest.mark.parametrize("document", ["*/_pending.json", "*/_decision.json"])
def test_a_torn_protocol_document_stops_the_job_with_an_error_naming_it(document: str) -> None:
    """A store that tears a create-only write breaks the port's contract (S3 and the local store
    never do). The protocol then refuses to guess: every run fails naming the file and the remedy,
    LATEST keeps verifying and the committed output stays a prefix of the fault-free output."""
    from spark_jobs.chaos.store import ChaosStore

    clock = ManualClock(CONFIG.start_ms)
    store = ChaosStore(clock)
    try:
        job = CONFIG.job()
        clock.advance(CONFIG.step_ms)
        assert cycle.run_cycle(job, store.uri, clock).status == "completed"
        store.arm(Fault("torn", frozenset({"put_if_absent", "put"}), document, times=1))
        clock.advance(CONFIG.step_ms)
        errors = []
        for run in range(3):
            try:
                cycle.run_cycle(job, store.uri, clock, request_id=f"run-{run}")
            except (Exception, SimulatedCrash) as exc:
                errors.append(str(exc))
        assert errors, "a torn protocol document went unnoticed"
        assert any("not valid JSON" in e and document.strip("*/") in e for e in errors), errors
        assert all("\n" not in e for e in errors)
        pointer = latest_pointer(store.inner, job.job_id)
        assert pointer is not None and not isinstance(pointer, str) and pointer.checkpoint_id == 1
        ref = reference(CONFIG)
        rows = committed_rows(store.inner, job.job_id, SINK)
        assert sorted(rows, key=repr) == sorted(ref.rows_by_tick[0], key=repr)
    finally:
        store.close()
