"""The ``epochal_maintenance`` DAG runs retention, then the audit of the retained checkpoints
(``validate_checkpoints``: every byte read back by default); the audit task fails naming the
damaged file and the remedy, and holds no lease (it only reads)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pendulum
import pytest
from airflow.sdk.exceptions import AirflowException
from epochal_airflow.config import EpochalSettings
from epochal_airflow.dag_factory import build_manual_dags
from epochal_airflow.operators.state import AuditCheckpointsOperator

from spark_jobs.runtime.cycle import run_cycle
from state_store.core import JobLayout, load_completed
from state_store.storage import open_store
from tests.unit.runtime.support import STEP_MS, new_clock, small_job


def test_the_maintenance_dag_audits_after_retention_even_when_retention_failed() -> None:
    settings = EpochalSettings.from_env({"AIRFLOW_HOME": "/h", "EPOCHAL_JOBS": "clickstream"})
    (maintenance,) = [d for d in build_manual_dags(settings) if d.dag_id == "epochal_maintenance"]
    assert [t.task_id for t in maintenance.topological_sort()] == ["apply_retention", "validate_checkpoints"]
    audit = maintenance.get_task("validate_checkpoints")
    assert isinstance(audit, AuditCheckpointsOperator) and audit.trigger_rule == "all_done"
    assert maintenance.params["deep"] is True


def _execute(op: AuditCheckpointsOperator) -> Any:
    ti = SimpleNamespace(dag_id="epochal_maintenance", task_id="validate_checkpoints", try_number=1)
    return op.execute(
        {"ti": ti, "run_id": "r1", "data_interval_end": pendulum.datetime(2024, 1, 1, tz="UTC")}
    )


def test_the_audit_task_passes_then_fails_naming_the_damaged_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, clock, uri = small_job(), new_clock(), tmp_path.as_uri()
    for _ in range(2):
        clock.advance(STEP_MS)
        run_cycle(job, uri, clock)
    monkeypatch.setattr(
        AuditCheckpointsOperator, "hold_lease", lambda *a: pytest.fail("the audit took the lease")
    )
    job_ref = "tests.unit.runtime.support:small_job"
    op = AuditCheckpointsOperator(task_id="validate_checkpoints", job=job_ref, store_uri=uri, deep="True")
    result = _execute(op)
    assert result["deep"] is True and result["checkpoints"] == [1, 2] and result["files"] > 0
    meta = load_completed(open_store(uri), JobLayout(job.job_id), 2).metadata
    key = next(h.key for h in meta.handles if "/shared/" in h.key)
    path = tmp_path / key
    data = bytearray(path.read_bytes())
    data[5] ^= 0x20
    path.write_bytes(bytes(data))
    assert (
        _execute(AuditCheckpointsOperator(task_id="v", job=job_ref, store_uri=uri, deep="False"))["deep"]
        is False
    )
    with pytest.raises(
        AirflowException, match=rf"1 damaged: state file {key} has checksum blake3:.*: checkpoint 2 is"
    ):
        _execute(op)
