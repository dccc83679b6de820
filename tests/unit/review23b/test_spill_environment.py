"""Review of issue 23 item 1 (commit c2f4266): a hostile environment around the spill directory.

A ``state_dir`` that is a file is refused with one clear line naming the setting and the remedy
(a read-only one could not be tested here: the sandbox runs as root); epochs that fail, or whose
executor is killed, do not leave their spill directories (full copies of the state) behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.runtime import spill_state, warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import killpoints
from state_store.core.errors import BadInputError
from state_store.testing import ManualClock, SimulatedCrash
from tests.unit.review23b.test_spill_equivalence import STEP, job_of


def test_a_state_dir_that_is_a_file_is_refused_with_a_remedy(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    job = job_of(2, True, blocker)
    with pytest.raises(BadInputError, match=r"state_dir .*state.* (is not a directory|cannot)"):
        run_cycle(job, (tmp_path / "store").as_uri(), ManualClock(DEFAULT_START_MS + STEP), executor="local")


def test_epochs_that_fail_in_the_keyed_subtask_leave_no_spill_directory_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten epochs whose keyed subtask fails after its state upload (an exception: the process
    lives), each then retried: ``state_dir`` keeps no run file (``Job.state_dir``: one directory
    per attempt, deleted when the subtask is done with it)."""
    warm.clear()
    uri = (tmp_path / "store").as_uri()
    state_dir = tmp_path / "state"
    clock = ManualClock(DEFAULT_START_MS)
    upload = spill_state.write_spill

    def write_then_fail(*args: Any, **kwargs: Any) -> Any:
        upload(*args, **kwargs)
        raise SimulatedCrash(killpoints.AFTER_STATE_UPLOAD, None)

    for _ in range(10):
        job = job_of(2, True, state_dir, keys=300)
        clock.advance(STEP)
        monkeypatch.setattr(spill_state, "write_spill", write_then_fail)
        with pytest.raises(SimulatedCrash):
            run_cycle(job, uri, clock, executor="local")
        monkeypatch.setattr(spill_state, "write_spill", upload)
        assert run_cycle(job, uri, clock, executor="local").status == "completed"
    left = sorted(str(p.relative_to(state_dir)) for p in state_dir.rglob("*") if p.is_file())
    assert not left, f"{len(left)} files left in state_dir: {left[:5]}"


CRASHING_EPOCH = """
import os, sys
from pathlib import Path
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.testing import ManualClock
from spark_jobs.runtime import spill_state
from tests.unit.review23b.test_spill_equivalence import STEP, job_of

uri, state_dir, epoch = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
upload = spill_state.write_spill

def write_then_die(*args, **kwargs):
    upload(*args, **kwargs)
    os._exit(137)  # the executor dies after its state upload: no finally, no dispose

spill_state.write_spill = write_then_die
run_cycle(job_of(2, True, state_dir, keys=300), uri, ManualClock(DEFAULT_START_MS + epoch * STEP),
          executor="local")
"""


def test_spill_directories_of_attempts_killed_hard_are_swept(tmp_path: Path) -> None:
    """An executor killed mid-epoch (no Python cleanup) leaves its spill directories, each a full
    copy of its subtask's state. The next attempts of the same job and operator must remove them
    (or reuse them): else every crash adds a state's worth of disk, without bound."""
    warm.clear()
    uri = (tmp_path / "store").as_uri()
    state_dir = tmp_path / "state"
    clock = ManualClock(DEFAULT_START_MS)
    for epoch in range(1, 4):
        done = subprocess.run(
            [sys.executable, "-c", CRASHING_EPOCH, uri, str(state_dir), str(epoch)],
            cwd=Path(__file__).parents[3], capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 137, done.stderr[-2000:]
        clock.advance(STEP)
        assert clock.now_ms() == DEFAULT_START_MS + epoch * STEP
        assert (
            run_cycle(job_of(2, True, state_dir, keys=300), uri, clock, executor="local").status
            == "completed"
        )
    left = sorted({str(p.parent.relative_to(state_dir)) for p in state_dir.rglob("*.arrow")})
    assert not left, f"{len(left)} spill directories of dead attempts kept: {left}"
