"""What makes a restore wait for a person (``spark_jobs.lifecycle.restore_losses``, the reasons the
``epochal_restore`` DAG shows), the approval DAG's shape, and the epoch DAG's refusal of Airflow's
own backfill (issue 22). The Airflow runs themselves are in tests/integration/airflow/."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.lifecycle.restore_losses import restore_losses
from state_store.core.restore import (
    JobShape,
    OperatorShape,
    RestoreOptions,
    RestorePlan,
    SnapshotShape,
    plan_restore,
)

DAGS = Path(__file__).resolve().parents[3] / "dags"
KEYED = {"acc": "value"}


def plan(
    job_ops: list[OperatorShape], snap_ops: list[OperatorShape], checkpoint_id: int = 2, **options: object
) -> RestorePlan:
    job = JobShape("j", 16, tuple(job_ops))
    snapshot = SnapshotShape("j", 16, "checkpoint", checkpoint_id, "mem://j/2", tuple(snap_ops))
    return plan_restore(job, snapshot, RestoreOptions(**options))  # type: ignore[arg-type]


def op(uid: str, parallelism: int = 2, states: dict[str, str] | None = None) -> OperatorShape:
    return OperatorShape(uid, True, True, parallelism, dict(KEYED if states is None else states))


def test_restoring_the_latest_checkpoint_unchanged_loses_nothing() -> None:
    assert restore_losses(plan([op("a")], [op("a")]), latest_checkpoint_id=2) == ()


def test_a_new_operator_or_a_new_state_starting_empty_loses_nothing() -> None:
    grown = plan([op("a", states={"acc": "value", "extra": "value"}), op("b")], [op("a")])
    assert grown.ok and restore_losses(grown, latest_checkpoint_id=2) == ()


def test_a_rescale_is_a_loss_naming_the_operator_and_both_parallelisms() -> None:
    assert restore_losses(plan([op("a", 3)], [op("a", 2)])) == (
        "rescales operator 'a' from 2 to 3 subtasks "
        "(state re-split by key group; the new parallelism sticks)",
    )


def test_dropped_operator_state_and_dropped_states_are_losses() -> None:
    dropped = plan([op("a", states={})], [op("a"), op("gone")], allow_non_restored_state=True)
    assert dropped.ok
    assert restore_losses(dropped) == (
        "drops state 'acc' of operator 'a': the job no longer registers it",
        "drops the state of operator 'gone' ('acc'): no operator of the job takes it",
    )


def test_a_uid_mapping_is_a_loss() -> None:
    renamed = plan([op("new")], [op("old")], uid_map={"old": "new"})
    assert renamed.ok
    assert restore_losses(renamed) == ("maps snapshot operator 'old' onto job operator 'new'",)


def test_a_rewind_past_the_latest_checkpoint_is_a_loss_naming_retracting_sinks() -> None:
    rewind = plan([op("a")], [op("a")], checkpoint_id=2)
    assert restore_losses(rewind, latest_checkpoint_id=2) == ()
    assert restore_losses(rewind, latest_checkpoint_id=5) == (
        "rewinds the job from checkpoint 5 to 2: the epochs after 2 are reprocessed",
    )
    assert restore_losses(rewind, latest_checkpoint_id=5, retracting_sinks=["out"])[0].endswith(
        "; sink 'out' (on_rewind=overwrite) withdraw the output committed after checkpoint 2"
    )


@pytest.fixture
def dags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EPOCHAL_STORE_URI", "s3://nowhere/x?endpoint_url=http://127.0.0.1:9")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS)).dags


def test_the_restore_dag_plans_then_waits_for_approval_then_restores(dags) -> None:  # type: ignore[no-untyped-def]
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    dag = dags["epochal_restore"]
    assert [t.task_id for t in dag.topological_sort()] == ["plan_restore", "approve_restore", "restore"]
    approve = dag.get_task("approve_restore")
    assert isinstance(approve, ApprovalOperator) and approve.defaults == ["Reject"]  # timeout = reject
    assert dag.params["auto_approve"] is True and dag.params["dry_run"] is True


def test_epoch_dags_refuse_airflows_backfill_and_point_to_epochal_backfill(dags) -> None:  # type: ignore[no-untyped-def]
    dag = dags["epochal_clickstream"]
    types = {t.value for t in dag.allowed_run_types}
    assert "backfill" not in types and {"scheduled", "manual", "asset_triggered"} <= types
    assert "epochal_backfill" in dag.doc_md
