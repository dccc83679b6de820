"""One status model (``state_store.core.status``): every reader derives a checkpoint's status from
its documents the same way, and the values stay the words the JSON outputs always had."""

from __future__ import annotations

import json

import pytest

from spark_jobs.runtime.cycle import run_cycle
from state_store.clocks import ManualClock
from state_store.core import CheckpointStatus, JobLayout, documents, status_of
from state_store.core.history import checkpoint_history
from state_store.core.manifests import DecisionRecord, Outcome
from state_store.monitoring.model import STATUSES
from state_store.monitoring.reader import CheckpointStats
from state_store.storage import open_store


@pytest.mark.parametrize(
    ("has_metadata", "decided", "aborted", "expected"),
    [
        (False, False, False, CheckpointStatus.IN_PROGRESS),
        (False, True, False, CheckpointStatus.COMPLETING),
        (False, True, True, CheckpointStatus.ABORTED),
        (True, True, False, CheckpointStatus.COMPLETED),
        (True, False, False, CheckpointStatus.COMPLETED),  # metadata is the fact; a decision may lag
    ],
)
def test_status_follows_from_the_documents(
    has_metadata: bool, decided: bool, aborted: bool, expected: str
) -> None:
    assert status_of(has_metadata=has_metadata, decided=decided, aborted=aborted) is expected


def test_values_serialise_as_the_old_words_and_monitoring_says_failed_for_aborted() -> None:
    assert json.dumps({"status": CheckpointStatus.COMPLETED}) == '{"status": "completed"}'
    assert f"{CheckpointStatus.ABORTED}" == "aborted" and CheckpointStatus.ABORTED == "aborted"
    assert (
        CheckpointStatus.ABORTED.label() == "failed" and CheckpointStatus.COMPLETING.label() == "completing"
    )
    assert set(STATUSES) == {"completed", "failed", "in_progress", "completing", "unreadable"}
    assert [s.decided for s in CheckpointStatus][:4] == [False, True, True, True]


def test_the_coordinator_the_history_and_monitoring_agree_on_every_checkpoint() -> None:
    from spark_jobs.jobs.loading import load_job

    uri = "memory://status-model"
    job = load_job("clickstream")
    clock = ManualClock(1_700_000_000_000)
    reports = []
    for _ in range(2):
        clock.advance(5_000)
        reports.append(run_cycle(job, uri, clock, executor="local"))
    assert [r.status for r in reports] == [CheckpointStatus.COMPLETED] * 2
    store = open_store(uri)
    # checkpoint 2's decision rewritten to ABORT and its metadata removed: every reader says aborted
    layout = JobLayout(job.job_id)
    decision = documents.read(store, layout.decision(2), DecisionRecord)
    store.delete(layout.metadata(2))
    store.put(
        layout.decision(2),
        documents.encode(DecisionRecord(**{**_fields(decision), "outcome": Outcome.ABORT})),
    )
    history = {r.checkpoint_id: r.status for r in checkpoint_history(store, job.job_id)}
    assert history == {1: CheckpointStatus.COMPLETED, 2: CheckpointStatus.ABORTED}
    rows = {r.checkpoint_id: r.status for r in CheckpointStats(store).stats(job.job_id).rows}
    assert rows == {1: "completed", 2: "failed"}
    assert all(isinstance(s, CheckpointStatus) for s in history.values())


def _fields(record: DecisionRecord) -> dict[str, object]:
    import dataclasses

    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def test_a_listing_fed_summary_equals_a_read_one_for_every_status() -> None:
    """Monitoring feeds ``summarize`` with what its listing showed; the CLI and the trigger let it
    read: both give the same summary, for completed, aborted, completing and in-progress folders."""
    from spark_jobs.jobs.loading import load_job
    from spark_jobs.runtime.cycle import trigger_epoch
    from state_store.core.history import summarize
    from state_store.monitoring.rows import list_checkpoints

    uri = "memory://status-model-listing"
    job = load_job("clickstream")
    clock = ManualClock(1_700_000_000_000)
    for _ in range(3):
        clock.advance(5_000)
        assert run_cycle(job, uri, clock, executor="local").status == CheckpointStatus.COMPLETED
    store = open_store(uri)
    layout = JobLayout(job.job_id)
    clock.advance(5_000)
    assert trigger_epoch(job, store, clock, request_id="open") is not None  # 4: in progress
    decision = documents.read(store, layout.decision(2), DecisionRecord)
    store.delete(layout.metadata(2))  # decided COMPLETE, metadata not yet written
    store.delete(layout.metadata(3))
    store.put(
        layout.decision(3),
        documents.encode(DecisionRecord(**{**_fields(decision), "outcome": Outcome.ABORT})),
    )
    listed = list_checkpoints(store, layout)
    statuses = {}
    for i, item in listed.items():
        fed, _ = summarize(store, layout, i, present=item.docs, acks_by_attempt=item.acks)
        read, _ = summarize(store, layout, i)
        assert fed == read, i
        statuses[i] = fed.status
    assert statuses == {
        1: CheckpointStatus.COMPLETED,
        2: CheckpointStatus.COMPLETING,
        3: CheckpointStatus.ABORTED,
        4: CheckpointStatus.IN_PROGRESS,
    }


def test_an_abort_reason_is_read_as_the_enum_and_an_unknown_one_is_refused() -> None:
    from state_store.core import CheckpointFailureReason, ManifestError

    abort = DecisionRecord(5, Outcome.ABORT, 10, reason="CHECKPOINT_EXPIRED", message="late")
    assert abort.abort_reason() is CheckpointFailureReason.CHECKPOINT_EXPIRED
    for bad in (
        DecisionRecord(5, Outcome.ABORT, 10, reason="TOO_SLOW"),
        DecisionRecord(5, Outcome.COMPLETE, 10),
    ):
        with pytest.raises(ManifestError, match=r"decision of checkpoint 5 .* names no known failure reason"):
            bad.abort_reason()
