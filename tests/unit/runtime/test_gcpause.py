"""The subtask GC pause nests, survives exceptions and respects a collector disabled by the user."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.runtime.gcpause import gc_paused
from spark_jobs.runtime.keyed_subtask import KeyedSubtask
from spark_jobs.runtime.operators import dedup
from spark_jobs.runtime.subtask import SubtaskRunner

from .support import STEP_MS, cycle, final_state, new_clock, small_job, store_uri


def test_nested_pauses_resume_only_at_the_outermost_exit() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_exception_still_ends_the_pause() -> None:
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_disabled_by_the_process_stays_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_finished_epoch_leaves_its_state_to_reference_counting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Subtasks dispose of their state before the pause ends: with the collector off, an epoch
    leaves far fewer objects behind than the same epoch without ``dispose`` (then the backends sit
    in reference cycles and their entries wait for -- and are traversed by -- the collector). The
    deduplication's seen keys stay on the heap backend here (on its columns they are a few arrays)."""
    monkeypatch.setattr(dedup, "COLUMNAR", False)
    job = small_job(events_per_second=1500)
    uri = store_uri(tmp_path)
    clock = new_clock()

    def objects_left_by_one_epoch() -> int:
        gc.collect()
        gc.disable()
        try:
            before = len(gc.get_objects())
            clock.advance(STEP_MS)
            cycle(job, uri, clock)
            return len(gc.get_objects()) - before
        finally:
            gc.enable()

    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    entries = sum(len(v) for v in final_state(uri, job).values() if isinstance(v, (list, dict)))
    disposed = objects_left_by_one_epoch()
    monkeypatch.setattr(SubtaskRunner, "dispose", lambda self: None)
    kept = objects_left_by_one_epoch()
    assert entries > 20_000
    assert kept > entries, "without dispose the state should wait for the collector"
    assert disposed * 5 < kept, f"{disposed} objects left with dispose, {kept} without ({entries} entries)"


def test_a_subtask_runs_restore_to_acks_in_one_pause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector stays off from the restore (``open_subtask``) to the acks: the restored
    state is not traversed by a collection in between."""
    seen: list[bool] = []
    original = KeyedSubtask.run

    def run(self: KeyedSubtask, messages: Any) -> Any:
        seen.append(gc.isenabled())  # between the restore and the processing
        return original(self, messages)

    monkeypatch.setattr(KeyedSubtask, "run", run)
    job = small_job()
    uri = store_uri(tmp_path)
    clock = new_clock()
    clock.advance(STEP_MS)
    cycle(job, uri, clock)
    assert seen and not any(seen)
    assert gc.isenabled()
