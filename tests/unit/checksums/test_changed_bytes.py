"""A state file whose bytes change after they were written and verified (disk or bucket corruption,
a bad copy, a hand edit; same size, so no listing can see it) passes completion's checks -- which no
longer read files back -- but ``epochal validate --deep`` finds it (the file, the checkpoints that
reference it, the remedy) and every restore refuses it, naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_jobs.cli import main
from spark_jobs.runtime.cycle import run_cycle
from state_store.core import CheckpointVerificationError, JobLayout, load_completed
from state_store.core.audit import audit_checkpoints
from state_store.storage import open_store
from tests.unit.core.helpers import TASKS, make_job
from tests.unit.runtime.support import STEP_MS, new_clock, small_job


def flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def test_bytes_changed_before_the_decision_pass_completion_and_are_found_by_the_deep_audit() -> None:
    job = make_job()
    first = job.cycle()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    acks = [job.ack(n, t) for t in TASKS]
    handle = acks[0].handles[0]
    job.store.put(handle.key, b"X" * handle.size)  # same size, other bytes
    assert job.coordinator.complete(n).status == "completed"  # completion reads no file back
    layout = job.coordinator.layout
    load_completed(job.store, layout, n)  # presence and size: fine
    assert audit_checkpoints(job.store, "job", deep=False).ok
    report = audit_checkpoints(job.store, "job", deep=True)
    (finding,) = report.findings
    assert finding.key == handle.key and finding.checkpoints == (n,)
    assert "has checksum blake3:" in finding.problem and f"metadata says {handle.checksum}" in finding.problem
    assert f"checkpoint {n} is job job's latest" in finding.remedy
    assert f"--from {first} --force" in finding.remedy  # the newest checkpoint that passed
    assert report.checkpoints == (first, n) and report.files == 2 * len(TASKS)
    with pytest.raises(CheckpointVerificationError, match=rf"{handle.key} has checksum blake3:"):
        load_completed(job.store, layout, n, deep=True)


def test_validate_deep_finds_the_changed_file_and_the_next_restore_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, job, clock = tmp_path.as_uri(), small_job(), new_clock()
    for _ in range(2):
        clock.advance(STEP_MS)
        assert run_cycle(job, uri, clock).status == "completed"
    store, layout = open_store(uri), JobLayout(job.job_id)
    older, latest = (load_completed(store, layout, n).metadata for n in (1, 2))
    only_latest = sorted(
        {h.key for h in latest.handles if "/shared/" in h.key} - {h.key for h in older.handles}
    )
    key = only_latest[0]
    flip_one_byte(tmp_path / key)
    args = ["--job", job.job_id, "--store", uri]

    assert main(["validate", *args]) == 0  # presence and sizes: nothing to see
    assert "all verify" in capsys.readouterr().out

    assert main(["validate", "--deep", *args]) == 1
    out, err = capsys.readouterr()
    (damaged,) = [line for line in out.splitlines() if line.startswith("DAMAGED")]
    assert key in damaged and "(its bytes changed after they were written)" in damaged
    assert "referenced by checkpoint 2" in damaged
    assert f"checkpoint 2 is job {job.job_id}'s latest" in damaged and "--from 1 --force" in damaged
    assert err.startswith(f"epochal: job {job.job_id}: 1 damaged file(s), the first: state file {key}")
    assert len(err.strip().splitlines()) == 1

    assert main(["validate", "--deep", "--json", *args]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["deep"] is True and report["latest"] == 2
    assert [f["key"] for f in report["findings"]] == [key]
    assert main(["validate", "--deep", "--checkpoint", "1", *args]) == 0  # 1 does not reference it
    capsys.readouterr()

    clock.advance(STEP_MS)
    with pytest.raises(Exception, match=rf"state file {key} of checkpoint 2 has .* checksum blake3:"):
        run_cycle(job, uri, clock)


def test_validate_refuses_bad_input_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri, job, clock = tmp_path.as_uri(), small_job(), new_clock()
    clock.advance(STEP_MS)
    run_cycle(job, uri, clock)
    assert main(["validate", "--job", job.job_id, "--store", uri, "--checkpoint", "0"]) == 2
    assert (
        capsys.readouterr().err.strip() == "epochal: --checkpoint 0 is invalid: use a completed checkpoint id"
    )
    assert main(["validate", "--job", job.job_id, "--store", uri, "--checkpoint", "9"]) == 1
    assert "checkpoint 9 has no" in capsys.readouterr().out
    assert main(["validate", "--job", "nope", "--store", uri]) == 2
    assert "job 'nope' has no state" in capsys.readouterr().err
