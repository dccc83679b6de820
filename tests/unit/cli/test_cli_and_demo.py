"""The ``epochal`` CLI and the protocol demo, including real process deaths at every kill point
(``EPOCHAL_FAULT`` with ``EPOCHAL_FAULT_MODE=exit``) followed by a restart from storage alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.cli import main
from spark_jobs.tools.protocol_demo import WordCountSubtask
from state_store.core import JobLayout, killpoints, load_completed
from state_store.storage import LocalObjectStore

DEMO_POINTS = [p for p in killpoints.ALL if p != killpoints.MID_SINK_COMMIT]
RECORDS = 1000  # run_protocol_demo's default records per epoch


def epochal(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def final_counts(root: Path, job: str = "wordcount") -> tuple[int, dict[str, int]]:
    """(records consumed, merged word counts) of the latest completed checkpoint, from storage."""
    store = LocalObjectStore(root)
    history = json.loads(
        epochal("checkpoints", "list", "--store", root.as_uri(), "--job", job, "--json").stdout
    )
    latest = max(r["checkpoint_id"] for r in history if r["status"] == "completed")
    meta = load_completed(store, JobLayout(job), latest, deep=True).metadata
    offset, counts = 0, {}
    for task in meta.tasks:
        sub = WordCountSubtask(task.task.uid, task.task.subtask)
        sub.restore(store.get(task.handles[0].key).data)
        offset += sub.offset
        for word, count in sub.counts.items():
            counts[word] = counts.get(word, 0) + count
    return offset, counts


def test_demo_prints_the_checkpoint_history(tmp_path: Path) -> None:
    out = epochal("protocol-demo", "--store", (tmp_path / "s").as_uri(), "--epochs", "3")
    assert out.returncode == 0, out.stderr
    assert "checkpoint history" in out.stdout
    assert out.stdout.count("completed") == 2  # retained_checkpoints=2 in the demo


@pytest.mark.parametrize("point", DEMO_POINTS)
def test_process_killed_at_kill_point_resumes_exactly_once(point: str, tmp_path: Path) -> None:
    root = tmp_path / "store"
    crashed = epochal(
        "protocol-demo",
        "--store",
        root.as_uri(),
        "--epochs",
        "4",
        env={"EPOCHAL_FAULT": f"{point}@3", "EPOCHAL_FAULT_MODE": "exit"},
    )
    assert crashed.returncode == 137, f"kill point {point} was not reached: {crashed.stdout}{crashed.stderr}"
    restart = epochal("protocol-demo", "--store", root.as_uri(), "--epochs", "1")  # failover + one epoch
    assert restart.returncode == 0, restart.stderr
    consumed, _ = final_counts(root)
    done_epochs = consumed // (2 * RECORDS)
    assert done_epochs in (3, 4)  # 4 only when the crash came after the commit point of epoch 3
    rerun = epochal("protocol-demo", "--store", root.as_uri(), "--epochs", str(5 - done_epochs))
    assert rerun.returncode == 0, rerun.stderr

    reference = tmp_path / "reference"
    assert epochal("protocol-demo", "--store", reference.as_uri(), "--epochs", "5").returncode == 0
    assert final_counts(root) == final_counts(reference)


def test_bad_inputs_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoints", "list", "--store", "ftp://x", "--job", "j"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unsupported scheme" in err
    assert main(["checkpoints", "list", "--store", "memory://x", "--job", "../etc"]) == 2
    assert "job id '../etc' is invalid" in capsys.readouterr().err
    assert main(["checkpoints", "show", "--store", "memory://x", "--job", "j"]) == 2
    assert main(["checkpoints", "list", "--store", "memory://x"]) == 2  # a job id is required
    assert "the following arguments are required: --job" in capsys.readouterr().err
    assert main(["nonsense"]) == 2


def test_show_of_a_missing_checkpoint_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoints", "show", "--store", tmp_path.as_uri(), "--job", "j", "--id", "9"]) == 2
    assert "job 'j' has no state" in capsys.readouterr().err  # an unknown job is an error (issue 18)


def test_run_then_output_exports_the_committed_rows(tmp_path: Path) -> None:
    store = (tmp_path / "s").as_uri()
    run = epochal(
        "run",
        "--job",
        "clickstream",
        "--store",
        store,
        "--epochs",
        "3",
        "--executor",
        "local",
        "--time-step-ms",
        "10000",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    assert [r["status"] for r in json.loads(run.stdout)] == ["completed"] * 3
    out = tmp_path / "out.parquet"
    export = epochal(
        "output",
        "--store",
        store,
        "--job",
        "clickstream",
        "--sink",
        "page-counts-sink",
        "--out",
        str(out),
        "--json",
    )
    assert export.returncode == 0, export.stderr
    import pandas as pd

    frame = pd.read_parquet(out)
    assert len(frame) == json.loads(export.stdout)["rows"] > 0
    assert {"page", "window_start", "count"} <= set(frame.columns)


def test_run_with_an_unknown_job_exits_2(tmp_path: Path) -> None:
    result = epochal("run", "--job", "nope", "--store", tmp_path.as_uri(), "--executor", "local")
    assert result.returncode == 2
    assert "neither an example" in result.stderr


def test_cli_retention_archives_the_history_before_deleting(tmp_path: Path) -> None:
    """`epochal retention` deletes checkpoint folders; their monitoring rows must outlive them."""
    from state_store.monitoring.reader import CheckpointStats
    from state_store.storage import open_store

    store_uri = (tmp_path / "s").as_uri()
    assert epochal("protocol-demo", "--store", store_uri, "--epochs", "2").returncode == 0
    cut = epochal("retention", "--store", store_uri, "--job", "wordcount", "--retain", "1", "--json")
    assert cut.returncode == 0, cut.stderr
    assert json.loads(cut.stdout)["discarded"] == [1]
    assert not (tmp_path / "s" / "wordcount" / "checkpoints" / "1").exists()
    rows = CheckpointStats(open_store(store_uri)).stats("wordcount", wait=True).rows
    assert {(r.checkpoint_id, r.status) for r in rows} == {(1, "completed"), (2, "completed")}
