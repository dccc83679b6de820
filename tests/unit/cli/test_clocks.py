"""One clock per job (docs/clocks.md) and true durations.

The job's clock kind is recorded at its first run; a command with the other clock is refused in one
line (no exception class name, no negative milliseconds) and changes nothing; ``--replay-cut``
re-reads the last cut; ``restore`` stamps its import on the job's clock, moved by ``--time-step-ms``.
Checkpoints record wall-clock times beside the logical ones, so durations are true when the epoch's
clock stands still (Airflow, the simulated clock), and metadata without them still reads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.commands.common import clock_choice
from spark_jobs.commands.errors import UsageError
from state_store.clocks import ClockKind, ManualClock, read_clock
from state_store.core import checkpoint_history, documents
from state_store.core.codec import canonical_json
from state_store.core.config import CheckpointConfig
from state_store.core.coordinator import CheckpointCoordinator
from state_store.core.failures import CheckpointException, CheckpointFailureReason
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata
from state_store.core.trigger_checks import human_duration, min_pause_detail
from state_store.storage import open_store
from tests.unit.cli.support import epochal, files
from tests.unit.core.helpers import TASKS, make_job

SIM = ["--executor", "local", "--clock", "simulated", "--time-step-ms", "10000"]
WALL = ["--executor", "local"]
NEGATIVE = re.compile(r"(^|[\s(=])-\d")
"""A negative number (dates such as 2023-11-14 are not)."""


def _one_human_line(err: str) -> str:
    line = err.strip()
    assert "\n" not in line, err
    assert not re.search(r"\b[A-Z][a-z]+(Error|Exception)\b", line), line
    assert not NEGATIVE.search(line), line
    return line


@pytest.fixture
def store(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()


def test_the_first_run_records_the_clock_and_the_other_clock_is_refused_unchanged(
    capsys: pytest.CaptureFixture[str], store: str, tmp_path: Path
) -> None:
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM)
    assert code == 0, err
    record = read_clock(open_store(store), "clickstream")
    assert record is not None and record.kind is ClockKind.SIMULATED
    before = files(tmp_path / "store")
    code, out, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *WALL)
    assert code == 2 and not out
    line = _one_human_line(err)
    assert "runs on the simulated clock" in line and "--clock simulated --time-step-ms" in line, line
    assert files(tmp_path / "store") == before  # refused before anything changed
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM)
    assert code == 0, err


def test_a_wall_clock_job_refuses_the_simulated_clock_and_replay(
    capsys: pytest.CaptureFixture[str], store: str
) -> None:
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *WALL)
    assert code == 0, err
    for extra in (["--time-step-ms", "10000"], ["--replay-cut"]):
        code, _, err = epochal(
            capsys, "run", "--job", "clickstream", "--store", store, "--executor", "local", *extra
        )
        assert code == 2
        line = _one_human_line(err)
        assert "runs on the wall clock" in line and "leave out --clock simulated" in line, line


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"clock": "wall", "time_step_ms": 5}, "--time-step-ms 5 moves a simulated clock"),
        ({"clock": "simulated"}, "--clock simulated needs --time-step-ms N"),
        ({"replay_cut": True, "clock": "wall"}, "--replay-cut replays a cut on the simulated clock"),
        ({"replay_cut": True, "time_step_ms": 10}, "leave out --time-step-ms 10"),
        ({"time_step_ms": -1}, "--time-step-ms -1 is invalid"),
    ],
)
def test_contradicting_clock_options_are_one_line_each(given: dict[str, object], message: str) -> None:
    args = argparse.Namespace(**{"clock": None, "time_step_ms": None, "replay_cut": False, **given})
    with pytest.raises(UsageError, match=re.escape(message)):
        clock_choice(args, needs_step=True)


def test_time_step_alone_is_shorthand_for_simulated_and_replay_cut_is_step_zero() -> None:
    def choice(**given: object) -> tuple[object, int]:
        args = argparse.Namespace(**{"clock": None, "time_step_ms": None, "replay_cut": False, **given})
        c = clock_choice(args, needs_step=True)
        return c.kind, c.step_ms

    assert choice(time_step_ms=7) == (ClockKind.SIMULATED, 7)
    assert choice(replay_cut=True) == (ClockKind.SIMULATED, 0)
    assert choice(clock="wall") == (ClockKind.WALL, 0)
    assert choice() == (None, 0)


def _pending_ranges(store: str, checkpoint_id: int) -> dict[str, tuple[int, int]]:
    from state_store.core.manifests import PendingRecord

    layout = JobLayout("clickstream")
    return documents.read(open_store(store), layout.pending(checkpoint_id), PendingRecord).barrier.ranges


def test_replay_cut_rereads_the_cut_of_a_crashed_epoch(
    capsys: pytest.CaptureFixture[str], store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM)[0] == 0
    monkeypatch.setenv("EPOCHAL_FAULT_MODE", "raise")
    with pytest.raises(BaseException, match="simulated crash"):
        epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM, "--fault", "after_ack@2")
    monkeypatch.delenv("EPOCHAL_FAULT_MODE")
    capsys.readouterr()  # what the crashed run printed
    code, out, err = epochal(
        capsys,
        "run",
        "--job",
        "clickstream",
        "--store",
        store,
        "--executor",
        "local",
        "--replay-cut",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)[0]["checkpoint_id"] == 3
    assert _pending_ranges(store, 3) == _pending_ranges(store, 2)  # the crashed epoch's cut, again
    rows = {r.checkpoint_id: r for r in checkpoint_history(open_store(store), "clickstream")}
    assert rows[3].trigger_ms == rows[2].trigger_ms and str(rows[3].status) == "completed"


def test_restore_stamps_on_the_jobs_simulated_clock_moved_by_the_step(
    capsys: pytest.CaptureFixture[str], store: str
) -> None:
    assert epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM, "--epochs", "2")[0] == 0
    last = checkpoint_history(open_store(store), "clickstream")[-1].trigger_ms
    code, _, err = epochal(
        capsys, "restore", "--job", "clickstream", "--store", store, "--time-step-ms", "5000"
    )
    assert code == 0, err
    code, _, err = epochal(capsys, "restore", "--job", "clickstream", "--store", store)  # the job's clock
    assert code == 0, err
    imports = [
        r
        for r in checkpoint_history(open_store(store), "clickstream")
        if r.restored_from or r.checkpoint_id > 2
    ]
    assert [r.trigger_ms for r in imports] == [last + 5000, last + 5000], imports
    code, _, err = epochal(capsys, "restore", "--job", "clickstream", "--store", store, "--clock", "wall")
    assert code == 2 and "runs on the simulated clock" in _one_human_line(err)


def test_min_pause_refusals_read_as_human_durations_never_negative() -> None:
    ahead = min_pause_detail(
        now_ms=1_700_000_004_200, checkpoint_id=6, completed_ms=1_700_000_000_000, min_pause_ms=60_000
    )
    assert ahead.startswith("4.2 s since checkpoint 6 completed") and "1 min 00 s" in ahead, ahead
    behind = min_pause_detail(
        now_ms=1_700_000_000_000, checkpoint_id=6, completed_ms=1_780_000_000_000, min_pause_ms=0
    )
    assert "2023-11-14" in behind and "another clock" in behind, behind
    assert not NEGATIVE.search(behind), behind
    assert [human_duration(v) for v in (850, 12_300, 245_000, 11_000_000, 200_000_000)] == [
        "850 ms", "12.3 s", "4 min 05 s", "3 h 03 min", "2 d 07 h",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="cannot be negative"):
        human_duration(-1)


def _job(logical: ManualClock, wall: ManualClock | None, min_pause_ms: int = 0) -> Any:
    """An in-memory job (tests/unit/core/helpers) whose coordinator has ``wall`` as wall clock."""
    job = make_job(CheckpointConfig(min_pause_ms=min_pause_ms, timeout_ms=60_000))
    job.clock = logical
    job.coordinator = CheckpointCoordinator(
        job.store, job.job_id, clock=logical, config=job.coordinator.config, wall_clock=wall
    )
    return job


def test_durations_are_wall_clock_while_the_logical_clock_stands_still() -> None:
    from state_store.monitoring.rows import Listing, checkpoint_row

    logical, wall = ManualClock(1_700_000_000_000), ManualClock(1_800_000_000_000)
    job = _job(logical, wall)
    pending = job.coordinator.trigger(list(TASKS))
    assert pending.wall_trigger_ms == 1_800_000_000_000 and pending.trigger_ms == 1_700_000_000_000
    job.coordinator.start_attempt(1)
    job.ack_all(1)
    wall.advance(2_500)  # the epoch took 2.5 s of real time; its logical clock did not move
    result = job.coordinator.complete(1)
    assert str(result.status) == "completed"
    meta = result.checkpoint.metadata if result.checkpoint else None
    assert meta is not None
    assert (meta.wall_trigger_ms, meta.wall_completed_ms) == (1_800_000_000_000, 1_800_000_002_500)
    assert meta.completed_ms == meta.trigger_ms  # the logical time is unchanged
    summary = checkpoint_history(job.store, job.job_id)[0]
    assert summary.duration_ms == 2_500 and summary.trigger_ms == 1_700_000_000_000
    layout = JobLayout(job.job_id)
    docs = {i.key.rsplit("/", 1)[1]: i.version for i in job.store.list(layout.checkpoint_dir(1))}
    row, _ = checkpoint_row(job.store, layout, 1, Listing(docs=docs, acks={1: 3}))
    assert row.duration_ms == 2_500  # what the Checkpoints view shows


def test_an_aborted_checkpoint_has_a_wall_clock_duration_too() -> None:
    logical, wall = ManualClock(1_700_000_000_000), ManualClock(1_800_000_000_000)
    job = _job(logical, wall)
    job.coordinator.trigger(list(TASKS))
    wall.advance(4_000)
    job.coordinator.abort(1, CheckpointFailureReason.JOB_FAILOVER, "a new run started")
    assert checkpoint_history(job.store, job.job_id)[0].duration_ms == 4_000


def test_metadata_without_wall_times_still_reads_with_its_logical_duration() -> None:
    logical = ManualClock(1_700_000_000_000)
    job = _job(logical, None)  # an older writer: no wall times
    job.coordinator.trigger(list(TASKS))
    job.coordinator.start_attempt(1)
    job.ack_all(1)
    logical.advance(700)
    job.coordinator.complete(1)
    layout = JobLayout(job.job_id)
    raw = json.loads(job.store.get(layout.metadata(1)).data)
    assert raw["body"]["wall_trigger_ms"] == 0 and raw["body"]["wall_completed_ms"] == 0
    for name in ("wall_trigger_ms", "wall_completed_ms"):  # as an older Epochal wrote it
        del raw["body"][name]
    raw["sha256"] = hashlib.sha256(canonical_json(raw["body"])).hexdigest()
    job.store.put(layout.metadata(1), json.dumps(raw).encode())
    meta = documents.read(job.store, layout.metadata(1), CompletedMetadata)
    assert meta.wall_completed_ms == 0
    assert checkpoint_history(job.store, job.job_id)[0].duration_ms == 700


def test_a_logical_clock_behind_the_last_completion_is_refused_without_negative_time() -> None:
    job = _job(ManualClock(1_780_000_000_000), ManualClock(1), min_pause_ms=1)
    job.cycle()
    behind = CheckpointCoordinator(
        job.store, job.job_id, clock=ManualClock(1_700_000_000_000), config=job.coordinator.config
    )
    with pytest.raises(CheckpointException) as refused:
        behind.trigger(list(TASKS))
    assert refused.value.reason is CheckpointFailureReason.MINIMUM_TIME_BETWEEN_CHECKPOINTS
    assert not NEGATIVE.search(str(refused.value)) and "another clock" in str(refused.value)


def test_airflow_refuses_a_simulated_clock_job_and_records_wall_for_a_new_one(
    capsys: pytest.CaptureFixture[str], store: str
) -> None:
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException
    from epochal_airflow.operators.checkpoint import TriggerCheckpointOperator

    def context(run_id: str) -> dict[str, object]:
        from datetime import UTC, datetime

        now = datetime.now(tz=UTC)
        ti = SimpleNamespace(dag_id="epochal_clickstream", task_id="trigger_checkpoint", try_number=1)
        return {"ti": ti, "run_id": run_id, "data_interval_end": now, "logical_date": now}

    assert epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM)[0] == 0
    trigger = TriggerCheckpointOperator(task_id="trigger_checkpoint", job="clickstream", store_uri=store)
    with pytest.raises(AirflowFailException) as refused:
        trigger.execute(context("run-1"))
    line = _one_human_line(str(refused.value))
    assert "runs on the simulated clock" in line and "Airflow runs epochs on real time" in line
    fresh = store.replace("/store", "/fresh")
    TriggerCheckpointOperator(task_id="trigger_checkpoint", job="clickstream", store_uri=fresh).execute(
        context("run-1")
    )
    record = read_clock(open_store(fresh), "clickstream")
    assert (
        record is not None
        and record.kind is ClockKind.WALL
        and record.recorded_by == "airflow epochal_clickstream"
    )
