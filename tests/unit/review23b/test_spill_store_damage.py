"""Review of issue 23 item 1 (commit c2f4266): spill run files in the job's store
(``shared/<uid>/<blake3>.arrow``) damaged after their checkpoint completed, and retention of them.

A damaged file must be refused by the next cold restore with an error that names the file as the
store holds it (the key an operator can look up), and ``epochal validate --deep`` must find it.
Retention keeps every run file the retained checkpoints reference, so a job that ran many tiny
epochs with ``retained_checkpoints=1`` still restores cold (rescale), and removes the ones nothing
references any more."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.cli import main
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import apply_job_retention, run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.storage import open_store
from state_store.testing import ManualClock
from tests.unit.review23b.test_spill_equivalence import JOB, STEP, job_of, latest_metadata, result, run


def spill_keys(uri: str) -> list[str]:
    """The store keys of the run files the latest checkpoint's acks of ``typed`` reference."""
    return sorted(
        {
            r["file"]["key"]
            for t in latest_metadata(uri).tasks
            if t.task.uid == "typed" and "spill" in t.snapshot
            for r in t.snapshot["spill"]["runs"]
        }
    )


def store_path(tmp_path: Path, key: str) -> Path:
    return tmp_path / "store" / JOB / key if not key.startswith(JOB + "/") else tmp_path / "store" / key


def damaged_job(tmp_path: Path) -> tuple[str, ManualClock, str]:
    uri = (tmp_path / "store").as_uri()
    clock = ManualClock(DEFAULT_START_MS)
    for _ in range(3):
        clock.advance(STEP)
        assert (
            run_cycle(job_of(2, True, tmp_path / "state"), uri, clock, executor="local").status == "completed"
        )
    keys = spill_keys(uri)
    assert keys, "the latest checkpoint references no spill run file"
    target = store_path(tmp_path, keys[-1])
    assert target.is_file(), target
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    target.write_bytes(bytes(data))
    return uri, clock, keys[-1]


def test_validate_deep_finds_a_damaged_spill_run_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, _, key = damaged_job(tmp_path)
    assert main(["validate", "--deep", "--job", JOB, "--store", uri]) == 1
    assert key.rsplit("/", 1)[-1] in capsys.readouterr().out


def test_a_cold_restore_refuses_a_damaged_spill_run_file_naming_its_store_key(tmp_path: Path) -> None:
    uri, clock, key = damaged_job(tmp_path)
    clock.advance(STEP)
    digest = key.rsplit("/", 1)[-1]
    message = ""
    try:
        report = run_cycle(job_of(3, True, tmp_path / "state"), uri, clock, executor="local")
        message = f"{report.status} {report.reason} {report.summaries}"
    except Exception as exc:  # the epoch may raise or report: either must name the file
        message = f"{type(exc).__name__}: {exc}"
    assert "complet" not in message.split(" ", 1)[0], f"the damaged checkpoint was restored: {message}"
    assert digest in message, f"the error does not name the damaged store file {key}: {message}"


def test_retention_keeps_referenced_run_files_through_many_tiny_epochs(tmp_path: Path) -> None:
    """Twelve small epochs at ``retained_checkpoints=1`` (compactions every few epochs), retention
    past the orphan grace period, then a rescale reads everything from the store: the same output
    and state as in memory, and ``shared/typed`` holds exactly the run files the latest checkpoint
    references (none deleted that it needs, none kept that nothing needs)."""
    outcomes = []
    for spill in (False, True):
        warm.clear()
        uri = (tmp_path / f"store-{spill}").as_uri()
        clock = ManualClock(DEFAULT_START_MS)
        for epoch in range(13):
            if epoch == 12:  # retention long after the grace period, then a cold rescaled restore
                job = job_of(2, spill, tmp_path / "state", keys=200, retained=1)
                apply_job_retention(job, open_store(uri), ManualClock(DEFAULT_START_MS + 10**12))
                if spill:
                    shared = tmp_path / f"store-{spill}" / JOB / "shared" / "typed"
                    stored = {f"{JOB}/shared/typed/{p.name}" for p in shared.iterdir()}
                    referenced = set(spill_keys(uri))
                    assert referenced <= stored, f"referenced run files deleted: {referenced - stored}"
                    assert stored == referenced, f"{len(stored - referenced)} unreferenced run files kept"
            clock.advance(STEP)
            job = job_of(3 if epoch == 12 else 2, spill, tmp_path / "state", keys=200, retained=1)
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
        outcomes.append(result(uri))
    assert outcomes[1] == outcomes[0]


def test_state_digest_reads_a_spill_checkpoint_like_a_heap_one(tmp_path: Path) -> None:
    """``state_digest`` and the CLI's inspection see the same rows for both backends."""
    warm.clear()
    heap = run((tmp_path / "heap").as_uri(), False, tmp_path / "hs", [2, 2], keys=100)
    disk = run((tmp_path / "disk").as_uri(), True, tmp_path / "ds", [2, 2], keys=100)
    assert disk[1] == heap[1]
    assert result((tmp_path / "disk").as_uri()) == disk
