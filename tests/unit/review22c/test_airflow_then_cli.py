"""Review of issue 22: a job Airflow created (wall clock) refuses a simulated `epochal run` in one
line and changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from state_store.clocks import ClockKind, read_clock
from state_store.storage import open_store
from tests.unit.cli.support import epochal, files


def test_a_job_airflow_created_refuses_a_simulated_cli_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from epochal_airflow.operators.checkpoint import TriggerCheckpointOperator

    store = (tmp_path / "store").as_uri()
    now = datetime.now(tz=UTC)
    ti = SimpleNamespace(dag_id="epochal_clickstream", task_id="trigger_checkpoint", try_number=1)
    context = {"ti": ti, "run_id": "run-1", "data_interval_end": now, "logical_date": now}
    TriggerCheckpointOperator(task_id="trigger_checkpoint", job="clickstream", store_uri=store).execute(
        context
    )
    capsys.readouterr()  # Airflow's own log lines
    record = read_clock(open_store(store), "clickstream")
    assert record is not None and record.kind is ClockKind.WALL
    before = files(tmp_path / "store")
    for extra in (
        ["--time-step-ms", "10000"],
        ["--replay-cut"],
        ["--clock", "simulated", "--time-step-ms", "1"],
    ):
        code, out, err = epochal(
            capsys, "run", "--job", "clickstream", "--store", store, "--executor", "local", "--wait", *extra
        )
        assert code == 2 and not out, (extra, out, err)
        line = err.strip()
        assert "\n" not in line and "runs on the wall clock" in line and "airflow" in line, line
        assert files(tmp_path / "store") == before
