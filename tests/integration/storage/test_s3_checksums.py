"""Verified uploads and checksum-only completion on a real SeaweedFS S3 server (issue 20).

``put_verified`` checks the bytes against the writer's BLAKE3 before sending (a mismatch sends
nothing) and sends them with an S3 additional checksum (CRC32), which the server recomputes: bytes
changed in transit are refused (``BadDigest``) and nothing is stored. Completion then reads no state
file back; the deep audit and the restore read every byte."""

from __future__ import annotations

import io
from collections import Counter
from typing import Any

import pytest

from state_store.core import CheckpointCoordinator, JobLayout, TaskId, load_completed
from state_store.core.audit import audit_checkpoints
from state_store.core.checksums import checksum_of, put_checked
from state_store.core.completed import CheckpointVerificationError
from state_store.core.manifests import AckRecord
from state_store.core.ports import ChecksumMismatchError
from state_store.core.responder import TaskCheckpointResponder
from state_store.storage.s3 import SENT_CHECKSUM, S3ObjectStore
from state_store.testing import ManualClock

pytestmark = pytest.mark.integration

DATA = b"state file bytes " * 1000
KEY = "job/shared/op/file.arrow"


def _calls(store: S3ObjectStore) -> Counter[str]:
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    store._client.meta.events.register("before-call.s3", count)
    return calls


@pytest.mark.parametrize("create_only", [False, True])
def test_a_verified_upload_carries_an_additional_checksum_the_server_stores(
    s3_store: S3ObjectStore, create_only: bool
) -> None:
    put_checked(s3_store, KEY, DATA, checksum_of(DATA), create_only=create_only)
    assert s3_store.get(KEY).data == DATA
    head = s3_store._client.head_object(
        Bucket=s3_store.bucket, Key=f"{s3_store.prefix}/{KEY}", ChecksumMode="ENABLED"
    )
    assert SENT_CHECKSUM == "CRC32" and head.get("ChecksumCRC32")


def test_bytes_that_do_not_match_the_writers_checksum_are_never_sent(s3_store: S3ObjectStore) -> None:
    calls = _calls(s3_store)
    with pytest.raises(ChecksumMismatchError, match=rf"upload of '{KEY}' .* refused: .* nothing was sent"):
        put_checked(s3_store, KEY, DATA, checksum_of(DATA + b"!"), create_only=True)
    assert calls["PutObject"] == 0 and s3_store.head(KEY) is None


@pytest.mark.parametrize("create_only", [False, True])
def test_bytes_changed_in_transit_are_refused_by_the_server(
    s3_store: S3ObjectStore, create_only: bool
) -> None:
    """A byte flipped after botocore computed the CRC32 (a faulty proxy, a NIC): the server
    refuses the upload with BadDigest and stores nothing."""
    flipped: list[str] = []

    def corrupt(request: Any, **_: Any) -> None:
        body = request.body  # bytes, or a BytesIO (botocore's streaming body)
        raw = body.getvalue() if isinstance(body, io.BytesIO) else body
        if isinstance(raw, bytes) and len(raw) == len(DATA) and not flipped:
            changed = bytearray(raw)
            changed[100] ^= 0x01
            request.body = io.BytesIO(bytes(changed)) if isinstance(body, io.BytesIO) else bytes(changed)
            flipped.append(request.url)

    s3_store._client.meta.events.register("before-send.s3.PutObject", corrupt)
    with pytest.raises(ChecksumMismatchError, match=r"refused by the server \(BadDigest.*changed in transit"):
        put_checked(s3_store, KEY, DATA, checksum_of(DATA), create_only=create_only)
    assert flipped and s3_store.head(KEY) is None
    put_checked(s3_store, KEY, DATA, checksum_of(DATA), create_only=create_only)  # the retry
    assert s3_store.get(KEY).data == DATA


def test_completion_on_s3_reads_no_state_file_and_the_audit_finds_a_changed_one(
    s3_store: S3ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(1_000_000)
    coordinator = CheckpointCoordinator(s3_store, "s3job", clock=clock)
    tasks = [TaskId("op", i) for i in range(24)]
    pending = coordinator.trigger(tasks, positions={})
    n = pending.checkpoint_id
    attempt = coordinator.start_attempt(n).attempt
    responder = TaskCheckpointResponder(s3_store, "s3job")
    for task in tasks:
        handle = responder.upload_shared("op", f"state of subtask {task.subtask}".encode() * 50)
        responder.acknowledge(AckRecord(n, task, pending.generation, attempt, (handle,)))
    read: list[str] = []
    get = s3_store.get
    monkeypatch.setattr(s3_store, "get", lambda key: (read.append(key), get(key))[1])
    assert coordinator.complete(n).status == "completed"
    assert not [k for k in read if "/shared/" in k], read
    monkeypatch.undo()

    layout = JobLayout("s3job")
    handle = load_completed(s3_store, layout, n).metadata.handles[3]
    s3_store.put(handle.key, b"Z" * handle.size)  # changed after completion, same size
    load_completed(s3_store, layout, n)  # presence and sizes still pass
    report = audit_checkpoints(s3_store, "s3job", deep=True, concurrency=8)
    assert [f.key for f in report.findings] == [handle.key]
    assert "has checksum blake3:" in report.findings[0].problem
    with pytest.raises(CheckpointVerificationError, match=rf"{handle.key} has checksum blake3:"):
        load_completed(s3_store, layout, n, deep=True)
