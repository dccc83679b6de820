"""``epochal savepoint|savepoints|restore|backfill|inspect|checkpoints diff``: the happy path, and
every bad input refused with one line and exit code 2, changing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from spark_jobs.cli import main
from spark_jobs.sinks import read_committed
from state_store.core import checkpoint_history
from state_store.storage import open_store

JOB = "tests.unit.runtime.support:small_job"


def epochal(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    uri = (tmp_path / "store").as_uri()
    code, _, err = epochal(
        capsys,
        "run",
        "--job",
        JOB,
        "--store",
        uri,
        "--epochs",
        "3",
        "--executor",
        "local",
        "--time-step-ms",
        "10000",
    )
    assert code == 0, err
    return uri


def files(uri: str) -> dict[str, bytes]:
    root = Path(uri.removeprefix("file://"))
    return {
        str(p): p.read_bytes() for p in root.rglob("*") if p.is_file() and ".epochal-internal" not in p.parts
    }


def test_savepoint_inspect_diff_restore_and_backfill(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = epochal(
        capsys, "savepoint", "--job", JOB, "--store", store, "--name", "sp1", "--json", "--time-step-ms", "0"
    )
    assert code == 0, err
    location = json.loads(out)["location"]
    code, out, _ = epochal(capsys, "savepoints", "list", "--store", store, "--job", "clickstream", "--json")
    assert [r["name"] for r in json.loads(out)] == ["sp1"]

    parquet = tmp_path / "dedup.parquet"
    code, out, err = epochal(
        capsys,
        "inspect",
        "--store",
        store,
        "--job",
        "clickstream",
        "--savepoint",
        location,
        "--operator",
        "dedup",
        "--out",
        str(parquet),
    )
    assert code == 0, err
    assert len(pd.read_parquet(parquet)) > 100
    code, out, err = epochal(
        capsys,
        "checkpoints",
        "diff",
        "2",
        "3",
        "--store",
        store,
        "--job",
        "clickstream",
        "--max-parallelism",
        "16",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["dedup"]["added"] > 0

    before = files(store)
    code, out, err = epochal(
        capsys, "restore", "--job", JOB, "--store", store, "--from", location, "--dry-run"
    )
    assert code == 0, err
    assert "dedup" in out and "nothing was changed" in out
    assert files(store) == before
    code, out, err = epochal(
        capsys, "restore", "--job", JOB, "--store", store, "--from", location, "--json", "--time-step-ms", "0"
    )
    assert code == 0, err
    restored = json.loads(out)["checkpoint_id"]
    assert checkpoint_history(open_store(store), "clickstream")[-1].checkpoint_id == restored

    code, out, err = epochal(
        capsys,
        "backfill",
        "--job",
        JOB,
        "--store",
        store,
        "--from-savepoint",
        location,
        "--new-job",
        "clickstream-backfill",
        "--epochs",
        "2",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["epochs"] == 2
    assert read_committed(open_store(store), "clickstream-backfill", "page-counts-sink").num_rows > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["restore", "--job", JOB, "--from", "file:///nonexistent/sp"], "_metadata.json is missing"),
        (["restore", "--job", JOB, "--from", "42"], "checkpoint 42 of job clickstream was not found"),
        (["restore", "--job", JOB, "--from", "latest", "--uid-map", "nope"], "use OLD=NEW"),
        (["restore", "--job", JOB, "--from", "latest", "--uid-map", "ghost=dedup"], "ghost"),
        (
            [
                "inspect",
                "--job",
                "clickstream",
                "--checkpoint",
                "3",
                "--operator",
                "ghost",
                "--out",
                "x.json",
            ],
            "operator uid 'ghost'",
        ),
        (["inspect", "--job", "clickstream", "--out", "x.json", "--operator", "dedup"], "exactly one of"),
        (["savepoints", "dispose", "--job", "clickstream", "--name", "never"], "does not exist"),
        (["run", "--job", "nope"], "neither an example"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    store: str, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files(store)
    code, _, err = epochal(capsys, *args, "--store", store)
    assert code == 2, err
    assert message in err and err.strip().count("\n") == 0
    assert files(store) == before


def test_a_savepoint_of_another_job_needs_allow_foreign(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = epochal(
        capsys, "savepoint", "--job", JOB, "--store", store, "--name", "mine", "--json", "--time-step-ms", "0"
    )
    assert code == 0, err
    location = json.loads(out)["location"]
    other = (tmp_path / "other").as_uri()
    code, _, err = epochal(
        capsys,
        "restore",
        "--job",
        "spark_jobs.examples.keyed_counts:build_job",
        "--store",
        other,
        "--from",
        location,
    )
    assert code == 2 and "allow_foreign" in err
