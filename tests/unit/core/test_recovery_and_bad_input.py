"""Recovery from storage alone, and bad input: every corrupt document is refused with a clear
error naming the object and the remedy, and nothing is deleted or overwritten."""

from __future__ import annotations

import json

import pytest

from state_store.core import (
    ChainHeadError,
    CheckpointVerificationError,
    CompletedCheckpointStore,
    InvalidNameError,
    JobLayout,
    ManifestError,
    UnsupportedFormatVersion,
    documents,
    load_completed,
)
from state_store.core.codec import format_version
from state_store.core.manifests import QuarantineRecord
from state_store.storage import InvalidStoreURI, open_store
from tests.unit.core.helpers import TASKS, make_job


def snapshot(store):  # type: ignore[no-untyped-def]
    return {info.key: store.get(info.key).data for info in store.list("")}


def recover(job):  # type: ignore[no-untyped-def]
    _, report = CompletedCheckpointStore.recover(job.store, job.coordinator.layout, 3)
    return report


def test_recovery_uses_latest_pointer() -> None:
    job = make_job()
    ids = [job.cycle() for _ in range(3)]
    report = recover(job)
    assert report.chosen == ids[-1] == report.pointer


def test_recovery_without_latest_picks_newest_verifying_metadata() -> None:
    job = make_job()
    ids = [job.cycle() for _ in range(3)]
    job.store.delete(job.coordinator.layout.latest)
    assert recover(job).chosen == ids[-1]


def test_recovery_with_stale_latest_picks_the_newer_completed_checkpoint() -> None:
    job = make_job()
    job.cycle()
    layout = job.coordinator.layout
    stale = job.store.get(layout.latest).data
    newest = job.cycle()
    job.store.put(layout.latest, stale)
    report = recover(job)
    assert report.pointer == newest - 1 and report.chosen == newest


def test_recovery_with_corrupt_latest_ignores_it_and_says_so() -> None:
    job = make_job()
    newest = [job.cycle() for _ in range(2)][-1]
    job.store.put(job.coordinator.layout.latest, b'{"format_version": 1, "kind": "lat')
    report = recover(job)
    assert report.chosen == newest and report.pointer is None
    assert any("LATEST pointer ignored" in s and "not valid JSON" in s for s in report.skipped)


def test_a_head_with_a_missing_state_file_stops_recovery_until_an_explicit_fall_back() -> None:
    job = make_job()
    first = job.cycle()
    second = job.cycle()
    meta = load_completed(job.store, job.coordinator.layout, second).metadata
    job.store.delete(meta.handles[0].key)
    with pytest.raises(ChainHeadError, match=rf"checkpoint {second} .* latest completed .* missing") as err:
        recover(job)
    assert err.value.checkpoint_id == second and err.value.base == first
    assert f"--from {first} --force" in str(err.value)
    assert job.coordinator.fall_back(err.value) is not None  # the caller checked the sinks
    report = recover(job)
    assert report.chosen == first
    assert job.store.head(job.coordinator.layout.quarantined(second)) is not None


def test_deep_verification_catches_a_bit_flip_in_a_state_file() -> None:
    job = make_job()
    n = job.cycle()
    layout = job.coordinator.layout
    handle = load_completed(job.store, layout, n).metadata.handles[0]
    data = bytearray(job.store.get(handle.key).data)
    data[0] ^= 0x01
    job.store.put(handle.key, bytes(data))
    load_completed(job.store, layout, n)  # size-only verification cannot see it
    with pytest.raises(
        CheckpointVerificationError, match=rf"{handle.key} has checksum blake3:.* restore from checkpoint"
    ):
        load_completed(job.store, layout, n, deep=True)


def test_a_quarantined_head_is_refused_and_an_older_one_never_chosen_silently() -> None:
    job = make_job()
    first = job.cycle()
    second = job.cycle()
    layout = job.coordinator.layout
    documents.create(job.store, layout.quarantined(second), QuarantineRecord(second, "GE audit failed", 0))
    with pytest.raises(ChainHeadError, match=rf"checkpoint {second} .* quarantined"):
        recover(job)
    third = job.cycle  # a new epoch cannot start either: its trigger reads the head
    with pytest.raises(ChainHeadError):
        third()
    job.coordinator.fall_back(ChainHeadError("", second, layout.quarantined(second), first))
    assert recover(job).chosen == first


def test_a_quarantined_older_checkpoint_is_never_chosen() -> None:
    job = make_job()
    first, second, third = job.cycle(), job.cycle(), job.cycle()
    layout = job.coordinator.layout
    documents.create(job.store, layout.quarantined(second), QuarantineRecord(second, "GE audit failed", 0))
    completed, report = CompletedCheckpointStore.recover(job.store, layout, 3)
    assert report.chosen == third  # the queue is the head's lineage: second stays an ancestor
    assert [c.checkpoint_id for c in completed] == [third, second, first]


def test_the_retained_queue_is_the_heads_lineage_not_every_older_id() -> None:
    """A checkpoint the job fell back from (its id below the head, its output never committed)
    is not an ancestor of the head: recovery, and so the sinks' notify, never see it."""
    job = make_job()
    first, second = job.cycle(), job.cycle()
    layout = job.coordinator.layout
    job.coordinator.fall_back(ChainHeadError("", second, layout.metadata(second), first))
    third = job.cycle()  # continues first
    completed, report = CompletedCheckpointStore.recover(job.store, layout, 3)
    assert report.chosen == third and [c.checkpoint_id for c in completed] == [third, first]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[: len(b) // 2], "not valid JSON"),
        (lambda b: b.replace(b'"checkpoint_id":1', b'"checkpoint_id":7'), "fails its checksum"),
        (lambda b: b"", "not valid JSON"),
        (lambda b: b"[1, 2]", "not a JSON object"),
    ],
    ids=["truncated", "altered", "empty", "not-an-object"],
)
def test_corrupt_metadata_is_refused_naming_the_object_and_remedy(mutate, message) -> None:  # type: ignore[no-untyped-def]
    job = make_job()
    n = job.cycle()
    key = job.coordinator.layout.metadata(n)
    job.store.put(key, mutate(job.store.get(key).data))
    before = snapshot(job.store)
    with pytest.raises(ManifestError, match=message) as err:
        load_completed(job.store, job.coordinator.layout, n)
    assert key in str(err.value) and "restore from" in str(err.value)
    with pytest.raises(ChainHeadError, match=rf"checkpoint {n} .* does not verify") as refused:
        recover(job)  # refused, not skipped: nothing older is chosen silently
    assert key in str(refused.value)
    assert snapshot(job.store) == before


def test_unknown_future_format_version_is_refused_with_upgrade_hint() -> None:
    job = make_job()
    n = job.cycle()
    key = job.coordinator.layout.metadata(n)
    doc = json.loads(job.store.get(key).data)
    doc["format_version"] = format_version("metadata") + 1
    job.store.put(key, json.dumps(doc).encode())
    with pytest.raises(UnsupportedFormatVersion, match=r"format_version 3, newer .*\(2\): upgrade Epochal"):
        load_completed(job.store, job.coordinator.layout, n)


def test_corrupt_ack_keeps_the_checkpoint_in_progress_and_is_reported() -> None:
    job = make_job()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack_all(n)
    ack_key = job.coordinator.layout.ack(n, "sink", 0, 1, 1)
    job.store.put(ack_key, job.store.get(ack_key).data[:40])
    result = job.coordinator.complete(n)
    assert result.status == "in_progress" and result.acked == 2
    assert result.ack_results[ack_key].startswith("corrupt:") and ack_key in result.ack_results[ack_key]


def test_metadata_copied_from_another_job_is_refused() -> None:
    job = make_job()
    n = job.cycle()
    other = JobLayout("other")
    job.store.put(other.metadata(n), job.store.get(job.coordinator.layout.metadata(n)).data)
    with pytest.raises(ManifestError, match="moved or altered"):
        load_completed(job.store, other, n)


@pytest.mark.parametrize("uid", ["../x", "a/b", "..", "", ".hidden", "x" * 129, "a b"])
def test_path_traversal_or_invalid_uid_is_refused(uid: str) -> None:
    layout = JobLayout("job")
    with pytest.raises(InvalidNameError, match="operator uid"):
        layout.state_file(1, uid, 0, 1, "arrow")
    with pytest.raises(InvalidNameError, match="job id"):
        JobLayout(uid)


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("ftp://host/x", "unsupported scheme"),
        ("file://relative/path", "absolute path"),
        ("s3://", "no bucket"),
        ("s3://key:secret@bucket/x", "must not carry credentials"),
        ("s3://bucket/x?endpoint=http://h", "unknown option"),
        ("not a uri", "unsupported scheme"),
    ],
)
def test_invalid_store_uri_is_refused_with_the_remedy(uri: str, message: str) -> None:
    with pytest.raises(InvalidStoreURI, match=message) as err:
        open_store(uri)
    assert "secret" not in str(err.value)
