"""Local recovery through crashes, retries, skipped, declined and aborted epochs, savepoints and
retention: each history gives the same committed output and the same checkpointed state as the same
history without local recovery, and adopts only where the kept operators equal the restore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_jobs.api.job import Job
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.lifecycle.snapshots import read_savepoint, savepoint_location
from tests.unit.review23.history import Epoch, play
from tests.unit.runtime.test_local_recovery import job_of

ADOPTED = "adopted"


def _job(kind: str, shape: str = "steady", retained: int = 3) -> Any:
    def make(parallelism: int, *, local_recovery: bool) -> Job:
        job = job_of(kind, parallelism, local_recovery=local_recovery, shape=shape)
        job.retained_checkpoints = retained
        return job

    return make


def _both(tmp_path: Path, make: Any, script: list[Epoch]) -> list[str]:
    cold = play((tmp_path / "cold").as_uri(), make, script, local_recovery=False)
    hot = play((tmp_path / "warm").as_uri(), make, script, local_recovery=True)
    assert hot[0] == cold[0] and hot[0], "the same committed output"
    assert hot[1] == cold[1], "the same checkpointed state"
    return hot[2]


CRASHES = [
    # undecided after the first crash: the retry is a new attempt of the same checkpoint, and crashes again
    ("after_ack", "before_decision"),
    ("before_decision", "after_ack"),
    ("after_chain_commit", "before_metadata"),
    ("before_metadata", "after_metadata"),
    ("after_ack", "after_pointer"),
    ("before_decision", "mid_sink_commit"),
    # decided by the first crash: the retry finishes the checkpoint
    ("after_metadata",),
    ("after_pointer",),
    ("mid_sink_commit",),
]


@pytest.mark.parametrize("crashes", CRASHES, ids="+".join)
@pytest.mark.parametrize("kind", ["dedup", "process", "lateness-heap"])
def test_a_crash_after_the_acks_and_a_second_crash_in_the_retry_stay_exactly_once(
    tmp_path: Path, kind: str, crashes: tuple[str, ...]
) -> None:
    """Acks written (the crashed attempt kept its operators for checkpoint 3), then a retry of the
    same request that may crash again: the same output and state as without local recovery."""
    script = [Epoch(), Epoch(), Epoch(crashes=crashes), Epoch(), Epoch()]
    how = _both(tmp_path, _job(kind), script)
    assert how[-1] == ADOPTED, how


@pytest.mark.parametrize("kind", ["dedup", "process", "sessions", "tumbling-columns"])
def test_a_skipped_epoch_between_two_adopted_ones_changes_nothing(tmp_path: Path, kind: str) -> None:
    script = [Epoch(), Epoch(), Epoch(advance=0), Epoch(advance=0), Epoch(), Epoch()]
    how = _both(tmp_path, _job(kind), script)
    assert how == ["store", ADOPTED, "skipped", "skipped", ADOPTED, ADOPTED], how


@pytest.mark.parametrize("kind", ["dedup", "process"])
def test_a_checkpoint_aborted_by_its_gate_after_every_ack_reads_the_store_next(
    tmp_path: Path, kind: str
) -> None:
    """Every subtask acked and kept its operators for checkpoint 3; the gate aborts it: the next
    epoch restores from 2 and must not adopt what ran past it."""
    refuse = Epoch(gate=lambda metadata: "refused by the review's gate", expect=("aborted",))
    script = [Epoch(), Epoch(), refuse, Epoch(), Epoch()]
    how = _both(tmp_path, _job(kind), script)
    assert how == ["store", ADOPTED, "aborted", "store", ADOPTED], how


def _savepoint(name: str) -> Any:
    def take(job: Job, uri: str, clock: Any) -> None:
        take_savepoint(job, uri, clock, name)

    return take


@pytest.mark.parametrize("kind", ["dedup", "process", "lateness-heap"])
def test_a_savepoint_between_epochs_is_the_cold_savepoint_and_the_chain_stays_exact(
    tmp_path: Path, kind: str
) -> None:
    script = [Epoch(), Epoch(), Epoch(before=_savepoint("sp")), Epoch(), Epoch()]
    how = _both(tmp_path, _job(kind), script)
    assert how[-1] == ADOPTED, how
    saved = {}
    for name in ("cold", "warm"):
        snapshot = read_savepoint(savepoint_location((tmp_path / name).as_uri(), f"warm-{kind}", "sp"))
        saved[name] = repr(sorted((uid, repr(op)) for uid, op in snapshot.operators.items()))
    assert saved["warm"] == saved["cold"]


@pytest.mark.parametrize("kind", ["dedup-long", "sessions"])
def test_retention_of_one_checkpoint_keeps_what_the_adopted_chain_references(
    tmp_path: Path, kind: str
) -> None:
    script = [Epoch() for _ in range(6)]
    how = _both(tmp_path, _job(kind, shape="sparse", retained=1), script)
    assert how[1:] == [ADOPTED] * 5, how
