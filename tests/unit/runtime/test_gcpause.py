"""The subtask GC pause nests, survives exceptions and respects a collector disabled by the user."""

from __future__ import annotations

import gc

import pytest

from spark_jobs.runtime.gcpause import gc_paused


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
