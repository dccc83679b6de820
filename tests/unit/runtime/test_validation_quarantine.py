"""Validation of real checkpoints: a clean one passes; a deliberately corrupted one (a key moved to
a wrong key group, with consistent checksums -- a buggy writer, not a torn file) fails, is
quarantined, and the automatic restore takes the previous good checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_jobs.lifecycle.checks import validate_checkpoint
from spark_jobs.runtime.cycle import coordinator_for
from spark_jobs.runtime.state_io import STATE_FILES
from state_store.core import JobLayout, documents, load_completed
from state_store.core.checksums import checksum_of, hex_of
from state_store.core.keygroups import KeyGroupRange, key_group_of
from state_store.core.manifests import CompletedMetadata, StateHandle, TaskSnapshot
from state_store.core.state.snapshot import KeyedStateSnapshot
from state_store.formats.keyed import decode_key_groups, encode_key_groups
from state_store.storage import open_store
from tests.unit.runtime.support import STEP_MS, cycle, new_clock, small_job


def move_one_key_to_another_key_group(store, job_id: str, n: int, uid: str) -> None:  # type: ignore[no-untyped-def]
    """Rewrite checkpoint n so that one entry of ``uid`` has a key of another key group, keeping
    every size and SHA-256 consistent (the metadata document is re-encoded)."""
    layout = JobLayout(job_id)
    meta = load_completed(store, layout, n).metadata
    tasks = list(meta.tasks)
    index = next(i for i, t in enumerate(tasks) if t.task.uid == uid and t.snapshot[STATE_FILES])
    task = tasks[index]
    kg_text, entry = next(iter(task.snapshot[STATE_FILES].items()))
    handle = entry.get("base", entry)
    part = decode_key_groups(store.get(handle["key"]).data)
    kg = int(kg_text)
    name, rows = next(iter(part.key_groups[kg].items()))
    stranger = next(
        f"stranger-{i}" for i in range(10_000) if key_group_of(f"stranger-{i}", part.max_parallelism) != kg
    )
    forged_rows = (rows[0]._replace(key=stranger), *rows[1:])
    moved = KeyedStateSnapshot(
        part.max_parallelism,
        KeyGroupRange(kg, kg),
        part.kinds,
        {kg: {**part.key_groups[kg], name: forged_rows}},
    )
    data = encode_key_groups(moved, "arrow")
    key = layout.shared_file(uid, hex_of(data), "arrow")
    store.put(key, data)
    new_handle = {"key": key, "size": len(data), "checksum": checksum_of(data)}
    files = dict(task.snapshot[STATE_FILES])
    files[kg_text] = new_handle
    kept = tuple(h for h in task.handles if h.key != handle["key"])
    handles = (*kept, StateHandle(key, len(data), new_handle["checksum"]))
    tasks[index] = TaskSnapshot(
        task.task, task.attempt, handles, task.metrics, {**task.snapshot, STATE_FILES: files}
    )
    forged = CompletedMetadata(
        meta.checkpoint_id,
        meta.job_id,
        meta.generation,
        meta.properties,
        meta.trigger_ms,
        meta.completed_ms,
        tuple(tasks),
        meta.positions,
        meta.master_states,
    )
    store.put(layout.metadata(n), documents.encode(forged))


def test_a_quarantined_head_whose_output_is_committed_stops_the_job_until_a_forced_restore(
    tmp_path: Path,
) -> None:
    """The audit runs after the sink committed the checkpoint's output: resuming from the checkpoint
    before it automatically would commit that output twice, so the job stops with the remedy; the
    forced restore from the older checkpoint retracts the output and the job reprocesses it once."""
    from spark_jobs.lifecycle.restore import RestoreRequest, restore
    from spark_jobs.sinks import read_committed
    from state_store.core import ChainHeadError

    uri, job, clock = tmp_path.as_uri(), small_job(), new_clock()
    for _ in range(3):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    store = open_store(uri)
    sink = next(s.uid for s in job.graph.steps if s.kind == "sink")
    fault_free = read_committed(store, job.job_id, sink).num_rows
    assert validate_checkpoint(job, store, 2, clock).passed
    move_one_key_to_another_key_group(store, job.job_id, 3, "dedup")
    load_completed(store, JobLayout(job.job_id), 3, deep=True)  # the forgery passes every checksum
    result = validate_checkpoint(job, store, 3, clock)
    assert not result.passed
    assert [c.name for c in result.failures] == ["key_groups_correct"]
    with pytest.raises(ChainHeadError, match=r"checkpoint 3 .* quarantined"):
        coordinator_for(job, store, clock).latest_completed()
    clock.advance(STEP_MS)
    with pytest.raises(ChainHeadError, match=r"already committed its output, which would be committed twice"):
        cycle(job, uri, clock)
    report = restore(job, uri, clock, RestoreRequest(source="2", force=True))
    assert report.checkpoint_id == 4  # the refused epoch allocated nothing
    assert read_committed(store, job.job_id, sink).num_rows < fault_free  # 3's output retracted
    clock.advance(STEP_MS)
    again = cycle(job, uri, clock)
    assert again.status == "completed"
    assert load_completed(store, JobLayout(job.job_id), again.checkpoint_id).metadata.positions["base"] == 4  # type: ignore[arg-type]
    assert read_committed(store, job.job_id, sink).num_rows >= fault_free


def test_a_quarantined_head_without_committed_output_falls_back_automatically(tmp_path: Path) -> None:
    from spark_jobs.runtime.cycle import notify_epoch_complete  # noqa: F401 (the step we skip)

    uri, job, clock = tmp_path.as_uri(), small_job(), new_clock()
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    store = open_store(uri)
    sink = next(s.uid for s in job.graph.steps if s.kind == "sink")
    log = f"{job.job_id}/sinks/{sink}/_commits/{3:010d}.json"
    clock.advance(STEP_MS)
    third = cycle(job, uri, clock)
    assert third.checkpoint_id == 3
    store.delete(log)  # as if the run died before notify_checkpoint_complete committed it
    move_one_key_to_another_key_group(store, job.job_id, 3, "dedup")
    assert not validate_checkpoint(job, store, 3, clock).passed
    clock.advance(STEP_MS)
    report = cycle(job, uri, clock)
    assert report.status == "completed"
    metadata = load_completed(store, JobLayout(job.job_id), report.checkpoint_id).metadata  # type: ignore[arg-type]
    assert metadata.positions["base"] == 2


def test_restore_refuses_a_snapshot_that_fails_validation_unless_forced(tmp_path: Path) -> None:
    from spark_jobs.lifecycle.restore import RestoreRequest, restore
    from spark_jobs.lifecycle.snapshots import SnapshotError

    uri, job, clock = tmp_path.as_uri(), small_job(), new_clock()
    for _ in range(3):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    store = open_store(uri)
    move_one_key_to_another_key_group(store, job.job_id, 3, "dedup")
    with pytest.raises(SnapshotError, match=r"fails validation.*--force"):
        restore(job, uri, clock, RestoreRequest(source="3"))
    assert restore(job, uri, clock, RestoreRequest(source="3", force=True)).checkpoint_id is not None


def test_user_expectations_per_operator_are_checked(tmp_path: Path) -> None:
    uri, clock = tmp_path.as_uri(), new_clock()
    job = small_job()
    job.expectations = {
        "dedup": [
            {
                "type": "expect_column_values_to_be_in_set",
                "kwargs": {"column": "state", "value_set": ["not-seen"]},
            }
        ]
    }
    clock.advance(STEP_MS)
    cycle(job, uri, clock)
    result = validate_checkpoint(job, open_store(uri), 1, clock, quarantine=False)
    assert [c.name for c in result.failures] == ["user:dedup:expect_column_values_to_be_in_set(state)"]


def test_sink_output_validation_catches_the_duplicates_of_at_least_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_jobs.runtime.cycle import run_cycle
    from state_store.faults import SimulatedCrash, kill_switch_from_env

    uri, clock = tmp_path.as_uri(), new_clock()
    job = small_job(mode="at_least_once")
    last = None
    for epoch in range(5):
        clock.advance(STEP_MS)
        if epoch == 2:
            monkeypatch.setenv("EPOCHAL_FAULT", "before_decision@3")
            with pytest.raises(SimulatedCrash):
                run_cycle(job, uri, clock, kill=kill_switch_from_env(os.environ))
            monkeypatch.delenv("EPOCHAL_FAULT")
        last = cycle(job, uri, clock).checkpoint_id
    assert last is not None
    result = validate_checkpoint(job, open_store(uri), last, clock, quarantine=False)
    assert [c.name for c in result.failures] == ["sink:page-counts-sink:keys_unique"]
    clean = small_job()
    clean_uri, clean_clock = (tmp_path / "clean").as_uri(), new_clock()
    for _ in range(5):
        clean_clock.advance(STEP_MS)
        last = cycle(clean, clean_uri, clean_clock).checkpoint_id
    assert validate_checkpoint(clean, open_store(clean_uri), last, clean_clock).passed  # type: ignore[arg-type]
