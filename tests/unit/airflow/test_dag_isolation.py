"""A job reference that cannot be loaded breaks only its own DAG (issue 22): the DAG file still
imports without errors, every other Epochal DAG is built, the broken job appears as a paused
``epochal_broken_<ref>`` DAG whose description and only task give the error and the remedy, and the
Checkpoints view lists it with its error instead of hiding it."""

from __future__ import annotations

from pathlib import Path

import pytest
from epochal_airflow.config import EpochalSettings
from epochal_airflow.dag_factory import broken_dag_id, build_all
from epochal_airflow.ui.app import JobDirectory

DAGS = Path(__file__).resolve().parents[3] / "dags"
BAD = "mypipes.wordcount:build_job"


def test_one_unloadable_job_leaves_every_other_dag_standing() -> None:
    settings = EpochalSettings.from_env({"EPOCHAL_JOBS": f"clickstream,{BAD}"})
    dags = build_all(settings)
    assert {"epochal_clickstream", "epochal_savepoint", "epochal_restore", "epochal_backfill"} <= set(dags)
    broken = dags[broken_dag_id(BAD)]
    assert broken.dag_id == "epochal_broken_mypipes_wordcount_build_job"
    assert broken.is_paused_upon_creation and broken.schedule is None and "broken" in broken.tags
    description = broken.description or ""
    assert "'mypipes.wordcount:build_job' cannot be loaded" in description
    assert "No module named 'mypipes'" in description and "PYTHONPATH" in description
    (task,) = broken.tasks
    with pytest.raises(RuntimeError, match="cannot be loaded"):
        task.python_callable(*task.op_args)  # type: ignore[attr-defined]


def test_the_dag_file_imports_without_errors_with_a_bad_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("EPOCHAL_STORE_URI", "s3://nowhere/x?endpoint_url=http://127.0.0.1:9")
    monkeypatch.setenv("EPOCHAL_JOBS", f"clickstream,{BAD}")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert {"epochal_clickstream", "epochal_maintenance", broken_dag_id(BAD)} <= set(bag.dags)


def test_the_checkpoints_view_lists_a_broken_job_with_its_error() -> None:
    directory = JobDirectory(("clickstream", BAD))
    assert directory.job_ids() == ["clickstream"]
    (error,) = directory.broken_jobs().values()
    assert BAD in error and "No module named 'mypipes'" in error
