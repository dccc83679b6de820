"""PrefixSource over a real S3 prefix (SeaweedFS): ETags as versions, server modification times,
listing across key=value folders, the manifest beside the landing zone, replay from a new process."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest

from spark_jobs.sources.base import read_table
from spark_jobs.sources.prefix import PrefixSource
from spark_jobs.sources.prefix_errors import FileChangedError, FileMissingError
from state_store.storage.s3 import S3ObjectStore
from state_store.testing.seaweedfs import SeaweedFSServer

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("event_time", pa.int64())])


def lines(first: int, count: int) -> bytes:
    return "".join(
        json.dumps({"id": f"r{n}", "event_time": n}) + "\n" for n in range(first, first + count)
    ).encode()


def open_source(store: S3ObjectStore) -> PrefixSource:
    return PrefixSource(
        "files",
        store,
        "landing",
        job_id="j",
        schema=SCHEMA,
        format="jsonl",
        partitions="folder",
        settle_ms=0,  # S3 shows an object only once it is whole; two listings still confirm it
    )


def ids(source: PrefixSource, partition: str, start: int, end: int) -> list[str]:
    return [str(x) for x in read_table(source, partition, start, end).column("id").to_pylist()]


def test_prefix_source_on_s3_admits_replays_and_refuses_deleted_or_changed_files(
    seaweedfs: SeaweedFSServer,
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    s3_store = seaweedfs.make_store("epochal-test", prefix)
    s3_store.put("landing/day=1/part-0.jsonl", lines(0, 2))
    s3_store.put("landing/day=2/part-0.jsonl", lines(2, 3))  # the same name in another folder
    s3_store.put("landing/day=2/_SUCCESS", b"")
    source = open_source(s3_store)
    assert source.end_offsets() == {"day=1": 0, "day=2": 0}  # first sight
    barrier = source.end_offsets()
    assert barrier == {"day=1": 2, "day=2": 3}

    s3_store.put("landing/day=1/0-late.jsonl", lines(5, 2))  # sorts first, arrives mid-epoch
    assert ids(source, "day=1", 0, 2) == ["r0", "r1"]

    replay = open_source(seaweedfs.make_store("epochal-test", prefix))  # its own S3 client
    for partition, end in barrier.items():  # a new process reads the same rows at the same offsets
        assert read_table(replay, partition, 0, end).equals(read_table(source, partition, 0, end))
    replay.end_offsets()
    assert replay.end_offsets() == {"day=1": 4, "day=2": 3}
    assert ids(replay, "day=1", 2, 4) == ["r5", "r6"]
    assert any(info.key.startswith("j/sources/files/manifest/day=1/") for info in s3_store.list("j/"))

    s3_store.delete("landing/day=1/part-0.jsonl")
    with pytest.raises(FileMissingError, match=r"landing/day=1/part-0\.jsonl.*on_missing_file='skip'"):
        ids(replay, "day=1", 0, 4)
    assert ids(replay, "day=1", 2, 4) == ["r5", "r6"]  # later offsets do not need the deleted file

    s3_store.put("landing/day=2/part-0.jsonl", lines(100, 3))  # same size, other bytes, new ETag
    with pytest.raises(FileChangedError, match=r"landing/day=2/part-0\.jsonl"):
        ids(replay, "day=2", 0, 3)
