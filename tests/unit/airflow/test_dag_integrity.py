"""DAG integrity: every DAG file imports with zero errors, the epoch-cycle DAG has the expected task
graph and settings, and parsing touches no storage."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from epochal_airflow.config import EpochalConfigError, EpochalSettings, parse_restart

DAGS = Path(__file__).resolve().parents[3] / "dags"
CHAIN = [
    "trigger_checkpoint",
    "run_epoch",
    "complete_checkpoint",
    "notify_checkpoint_complete",
    "validate",
    "apply_retention",
]


@pytest.fixture
def dagbag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    # An S3 store on a port nobody listens on: any storage access at parse time would hang or fail.
    monkeypatch.setenv("EPOCHAL_STORE_URI", "s3://nowhere/x?endpoint_url=http://127.0.0.1:9")
    monkeypatch.setenv("EPOCHAL_RESTART", "exponential:3:2:60")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    from airflow.dag_processing.dagbag import DagBag

    began = time.monotonic()
    bag = DagBag(dag_folder=str(DAGS))
    return bag, time.monotonic() - began


def test_every_dag_file_imports_without_errors_and_without_storage_access(dagbag) -> None:  # type: ignore[no-untyped-def]
    bag, seconds = dagbag
    assert bag.import_errors == {}
    assert {
        "epochal_clickstream",
        "epochal_savepoint",
        "epochal_restore",
        "epochal_backfill",
        "epochal_maintenance",
    } <= set(bag.dags)
    assert seconds < 30


def test_epoch_cycle_dag_has_the_expected_task_graph(dagbag) -> None:  # type: ignore[no-untyped-def]
    dag = dagbag[0].dags["epochal_clickstream"]
    assert [t.task_id for t in dag.topological_sort()] == CHAIN
    for upstream, downstream in itertools.pairwise(CHAIN):
        assert dag.get_task(upstream).downstream_task_ids == {downstream}
    assert dag.max_active_runs == 1 and dag.catchup is False
    run_epoch = dag.get_task("run_epoch")
    assert run_epoch.retries == 3 and run_epoch.retry_exponential_backoff


@pytest.mark.parametrize("text", ["fixed-delay:x:1", "sometimes", "exponential:1:2"])
def test_bad_restart_strategy_is_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(EpochalConfigError, match="use none, fixed-delay"):
        parse_restart(text)


def test_settings_from_env() -> None:
    settings = EpochalSettings.from_env(
        {"AIRFLOW_HOME": "/h", "EPOCHAL_JOBS": "clickstream", "EPOCHAL_RESTART": "none"}
    )
    assert settings.jobs == ("clickstream",) and settings.store_uri == "file:///h/epochal-store"
    assert settings.restart.retries == 0 and settings.schedule is None
    with pytest.raises(EpochalConfigError, match="EPOCHAL_EXECUTOR"):
        EpochalSettings.from_env({"EPOCHAL_EXECUTOR": "yarn"})


def test_the_provider_info_names_real_modules_and_classes() -> None:
    """``get_provider_info()`` (the provider-info shape of apache-airflow-providers-*) points at
    modules and classes that import."""
    import importlib

    from epochal_airflow import get_provider_info

    info = get_provider_info()
    modules = [
        m
        for kind in ("hooks", "operators", "sensors", "triggers")
        for i in info[kind]
        for m in i["python-modules"]
    ]
    assert len(modules) >= 7
    for module in modules:
        importlib.import_module(module)
    classes = [c["hook-class-name"] for c in info["connection-types"]] + [
        p["plugin-class"] for p in info["plugins"]
    ]
    for dotted in classes:
        module, _, name = dotted.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module), name), type), dotted
