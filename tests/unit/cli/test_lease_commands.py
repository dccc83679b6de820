"""The CLI under the job's lease (issue 18): every command that changes a job is refused with one
line naming the holder while another holds the lease, and changes nothing; ``--wait`` waits;
``lease show|break``; ``retention --pin/--unpin`` write pins retention honours; ``backfill`` into
an existing job id needs ``--replace``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from state_store.core import JobRecords
from state_store.core.lease import acquire
from state_store.lease_keeper import HeldLease
from state_store.storage import open_store
from tests.unit.cli.support import epochal, files

RUN = ["--executor", "local", "--time-step-ms", "10000"]


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    uri = (tmp_path / "store").as_uri()
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", uri, "--epochs", "3", *RUN)
    assert code == 0, err
    code, _, err = epochal(
        capsys, "savepoint", "--job", "clickstream", "--store", uri, "--name", "sp", "--time-step-ms", "1"
    )
    assert code == 0, err
    return uri


CHANGING = [
    ["run", "--job", "clickstream", "--epochs", "1", *RUN],
    ["restore", "--job", "clickstream", "--from", "latest"],
    ["savepoint", "--job", "clickstream", "--name", "other"],
    ["savepoints", "dispose", "--job", "clickstream", "--name", "sp"],
    ["retention", "--job", "clickstream", "--retain", "1"],
    ["retention", "--job", "clickstream", "--pin", "3"],
]


@pytest.mark.parametrize("argv", CHANGING, ids=lambda a: " ".join(a[:2]))
def test_a_busy_job_refuses_every_changing_command_with_one_line_and_changes_nothing(
    store: str, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = JobRecords(open_store(store), "clickstream")
    acquire(jobs, "cli:otherhost:999:abcd", "epochal run", int(time.time() * 1000))
    before = files(tmp_path / "store")
    code, _, err = epochal(capsys, *argv, "--store", store)
    assert code == 1, err
    line = err.strip()
    assert "\n" not in line
    assert "job clickstream is busy: `epochal run` (holder cli:otherhost:999:abcd, token" in line
    assert "--wait" in line and "epochal lease break --job clickstream" in line
    assert files(tmp_path / "store") == before


def test_wait_waits_for_the_lease_and_then_runs(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    held = HeldLease(open_store(store), "clickstream", "cli:otherhost:1:x", "epochal run", heartbeat=False)
    held.acquire()
    releaser = threading.Timer(1.5, held.release)
    releaser.start()
    started = time.monotonic()
    code, out, err = epochal(
        capsys,
        "run",
        "--job",
        "clickstream",
        "--store",
        store,
        "--epochs",
        "1",
        *RUN,
        "--wait",
        "--wait-timeout",
        "60",
    )
    assert code == 0, err
    assert time.monotonic() - started >= 1.0 and "checkpoint 5: completed" in out  # 4: the savepoint


def test_lease_show_and_break(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert epochal(capsys, "lease", "show", "--job", "clickstream", "--store", store)[1].strip() == (
        "job clickstream: the lease is free"
    )
    acquire(
        JobRecords(open_store(store), "clickstream"),
        "cli:deadhost:7:y",
        "epochal restore",
        int(time.time() * 1000),
    )
    code, out, _ = epochal(capsys, "lease", "show", "--job", "clickstream", "--store", store)
    assert code == 0 and "held by `epochal restore` (holder cli:deadhost:7:y" in out and "expires in" in out
    code, out, _ = epochal(capsys, "lease", "break", "--job", "clickstream", "--store", store, "--json")
    assert code == 0 and json.loads(out)["holder"] == "cli:deadhost:7:y"
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, "--epochs", "1", *RUN)
    assert code == 0, err
    code, _, err = epochal(capsys, "lease", "show", "--job", "nope", "--store", store)
    assert code == 2 and "job 'nope' has no state" in err


def test_pins_are_written_honoured_and_removed(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = epochal(capsys, "retention", "--job", "clickstream", "--store", store, "--pin", "99")
    assert code == 1 and "cannot pin checkpoint(s) 99 of job clickstream" in err
    code, out, err = epochal(
        capsys, "retention", "--job", "clickstream", "--store", store, "--pin", "1", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["pinned"] == [1]
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, "--epochs", "4", *RUN)
    assert code == 0, err  # every epoch's automatic retention ran
    code, out, _ = epochal(capsys, "checkpoints", "list", "--job", "clickstream", "--store", store, "--json")
    ids = [row["checkpoint_id"] for row in json.loads(out) if row["status"] == "completed"]
    assert 1 in ids and len(ids) >= 4
    code, _, err = epochal(capsys, "retention", "--job", "clickstream", "--store", store, "--unpin", "2")
    assert code == 1 and "cannot unpin checkpoint(s) 2" in err and "pinned: [1]" in err
    code, _, err = epochal(capsys, "retention", "--job", "clickstream", "--store", store, "--unpin", "1")
    assert code == 0, err
    code, out, _ = epochal(capsys, "checkpoints", "list", "--job", "clickstream", "--store", store, "--json")
    assert 1 not in [row["checkpoint_id"] for row in json.loads(out) if row["status"] == "completed"]


def test_backfill_into_an_existing_job_needs_replace(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    location = f"{store}/clickstream/savepoints/sp"
    args = [
        "backfill",
        "--job",
        "clickstream",
        "--store",
        store,
        "--from-savepoint",
        location,
        "--epochs",
        "1",
    ]
    code, _, err = epochal(capsys, *args, "--new-job", "fork")
    assert code == 0, err
    code, _, err = epochal(capsys, *args, "--new-job", "fork")
    assert code == 2 and "backfill job id 'fork' already has state" in err and "--replace" in err
    code, _, err = epochal(capsys, *args, "--new-job", "fork", "--replace")
    assert code == 0, err
