"""The pieces of a subtask: typed acks (the same documents as the hand-built dicts before them),
the channel-state encoding of unaligned checkpoints, the chain's exit, and a keyed stage with no
stateful step or sink (no channel-state anchor)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.runtime.acks import AckSite, SinkAck, SourceAck, StateAck, Timing
from spark_jobs.runtime.chain import OperatorChain, Route, StageExit
from spark_jobs.runtime.channel_state import (
    ChannelStateRecorder,
    ChannelStateRef,
    encode_channel_state,
    owned_rows,
    read_channel_state,
)
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.keys import key_column, key_groups
from spark_jobs.runtime.messages import from_message
from spark_jobs.runtime.operators.base import MapOperator
from spark_jobs.runtime.state_io import WrittenSnapshot
from spark_jobs.runtime.subtask_sinks import CHAIN_END, SubtaskSinks
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import documents
from state_store.core.checksums import checksum_of
from state_store.core.codec import sha256_hex
from state_store.core.keygroups import key_group_range_for_subtask
from state_store.core.manifests import AckRecord, DeclineRecord, StateHandle, TaskId
from state_store.core.stream import StreamStatus, Watermark
from state_store.core.twophase import PreCommittedTxn, sink_snapshot
from state_store.storage import open_store
from state_store.testing import ManualClock

SITE = AckSite(checkpoint_id=7, subtask=1, generation=3, attempt=2)
FILE = StateHandle("job/shared/op/abc.arrow", 120, "blake3:" + "a" * 64)
CHANNEL = ChannelStateRef(
    StateHandle("job/checkpoints/chk-7/channel/op/1.arrow", 50, "blake3:" + "c" * 64), 4
)


def written() -> WrittenSnapshot:
    return WrittenSnapshot(
        [FILE], {"state_files": {"0": {"base": FILE.key}}, "timers": {}, "extra": {}}, 120, 1
    )


def test_a_state_ack_is_the_document_of_the_hand_built_ack() -> None:
    timing = Timing(restore_s=0.12345678, snapshot_sync_s=1.0, upload_wait_s=0.5)
    ack = StateAck("op", written(), timing, 2.5, {"late_records": 3, "files_written": 9}, CHANNEL)
    expected = AckRecord(
        7,
        TaskId("op", 1),
        3,
        2,
        (FILE, CHANNEL.handle),
        metrics={
            "bytes_written": 120,
            "files_written": 9,  # the operator's own metric wins a name clash
            "state_files": 1,
            "restore_s": 0.123457,
            "snapshot_sync_s": 1.0,
            "upload_wait_s": 0.5,
            "alignment_ms": 2.5,
            "late_records": 3,
        },
        snapshot={
            **written().snapshot,
            "channel_state": {
                "key": CHANNEL.handle.key,
                "size": 50,
                "checksum": "blake3:" + "c" * 64,
                "rows": 4,
            },
        },
    )
    assert documents.encode(ack.record(SITE)) == documents.encode(expected)
    plain = StateAck("op", written(), Timing(), None, {}).record(SITE)
    assert plain.handles == (FILE,) and "channel_state" not in plain.snapshot
    assert "alignment_ms" not in plain.metrics  # sources have no input barrier
    assert ack.summary(1) == {"uid": "op", "subtask": 1, "bytes_written": 120}


def test_sink_source_acks_and_declines_are_the_documents_of_the_hand_built_ones() -> None:
    txn = PreCommittedTxn("out", 7, 1, 2, 3, (FILE,), rows=11)
    sink = SinkAck("out", txn, 1.5).record(SITE)
    expected_sink = AckRecord(
        7, TaskId("out", 1), 3, 2, (FILE,), {"rows": 11, "alignment_ms": 1.5}, sink_snapshot([txn])
    )
    assert documents.encode(sink) == documents.encode(expected_sink)
    anchored = SinkAck("out", txn, None, CHANNEL).record(SITE)
    assert anchored.handles == (FILE, CHANNEL.handle) and anchored.snapshot["channel_state"]["rows"] == 4

    source = SourceAck("clicks", "p0", 1_000, 40, 30, {"UNPARSEABLE": 2}).record(SITE)
    expected_source = AckRecord(
        7,
        TaskId("clicks", 1),
        3,
        2,
        (),
        metrics={"records": 30, "dead_letters": 2},
        snapshot={
            "source": {"partition": "p0", "max_ts": 1_000, "position": 40},
            "dead_letters": {"UNPARSEABLE": 2},
        },
    )
    assert documents.encode(source) == documents.encode(expected_source)
    assert SITE.decline("op", "CHECKPOINT_DECLINED") == DeclineRecord(
        7, TaskId("op", 1), 3, 2, "CHECKPOINT_DECLINED"
    )


def batch(users: list[str]) -> pa.RecordBatch:
    return pa.record_batch({"user_id": users, "n": list(range(len(users)))})


def test_channel_state_records_only_rows_and_round_trips_verified(tmp_path: Path) -> None:
    recorder = ChannelStateRecorder()
    recorder.add_input_data(5, 0, batch(["a", "b"]))
    recorder.add_input_data(5, 1, Watermark(10))
    recorder.add_input_data(5, 1, batch([]))
    recorder.add_input_data(5, 1, batch(["c"]))
    recorder.add_input_data(6, 0, batch(["d"]))
    assert [b.num_rows for b in recorder.batches[5]] == [2, 1]
    encoded = encode_channel_state(recorder.batches[5])
    assert encoded.rows == 3
    store = open_store(tmp_path.as_uri())
    store.put("chan.arrow", encoded.data)
    entry = {"key": "chan.arrow", "size": len(encoded.data), "checksum": checksum_of(encoded.data)}
    assert read_channel_state(store, entry).column("user_id").to_pylist() == ["a", "b", "c"]
    with pytest.raises(RuntimeError, match=r"chan\.arrow has .* checksum blake3:.* restore from an earlier"):
        read_channel_state(store, {**entry, "checksum": "blake3:" + "0" * 64})
    older = {"key": "chan.arrow", "sha256": sha256_hex(encoded.data)}  # an entry of format 1
    assert read_channel_state(store, older).num_rows == 3
    with pytest.raises(RuntimeError, match=r"chan\.arrow has .* checksum sha256:.* restore from an earlier"):
        read_channel_state(store, {**older, "sha256": "0" * 64})


def test_channel_state_rows_are_replayed_by_exactly_the_owners_of_their_key_groups() -> None:
    users = [f"user-{i}" for i in range(200)]
    table = pa.Table.from_batches([batch(users[:120]), batch(users[120:])])
    replayed: list[str] = []
    for subtask in range(3):
        owned = key_group_range_for_subtask(16, 3, subtask)
        for part in owned_rows(table, "user_id", owned, 16):
            groups = key_groups(key_column(part, "user_id"), 16)
            assert ((groups >= owned.first) & (groups <= owned.last)).all()
            replayed += part.column("user_id").to_pylist()
    assert sorted(replayed) == sorted(users)


class Recording:
    def __init__(self) -> None:
        self.written: list[tuple[Any, Any]] = []

    def write(self, txn: Any, batch: pa.RecordBatch) -> None:
        self.written.append((txn, batch))


def test_the_exit_routes_by_key_forwards_advancing_watermarks_and_counts_dropped_side_output() -> None:
    route = Route("user_id", channel=3, width=2, max_parallelism=16, parallelism=2)
    exit = StageExit(SubtaskSinks(0, 1, 1), route)
    chain = OperatorChain([], exit)
    chain.push(batch([f"user-{i}" for i in range(50)]))
    chain.push(batch([]))
    chain.watermark(10)
    chain.watermark(5)  # behind: not forwarded
    exit.broadcast(StreamStatus.IDLE)
    exit.side("late", batch(["x", "y"]))
    items = [(dest, m[0], m[1], from_message(m)) for dest, m in exit.outbox]
    assert all(channel == 3 for _, channel, _, _ in items)
    assert [seq for _, _, seq, _ in items] == list(range(len(items)))
    rows = [(dest, b) for dest, _, _, b in items if isinstance(b, pa.RecordBatch)]
    assert sum(b.num_rows for _, b in rows) == 50 == chain.rows_in == exit.rows_out
    for dest, b in rows:
        owners = key_groups(key_column(b, "user_id"), 16)
        owned = key_group_range_for_subtask(16, 2, dest)
        assert ((owners >= owned.first) & (owners <= owned.last)).all()
    assert [(d, i) for d, _, _, i in items if not isinstance(i, pa.RecordBatch)] == [
        (0, Watermark(10)),
        (1, Watermark(10)),
        (0, StreamStatus.IDLE),
        (1, StreamStatus.IDLE),
    ]
    assert exit.side_dropped == {"late": 2}


def test_the_exit_writes_to_the_stage_sink_and_side_sinks_and_operators_chain_in_order() -> None:
    sinks = SubtaskSinks(0, 1, 1)
    main, late = Recording(), Recording()
    sinks.taps, sinks.side = {CHAIN_END: ["out"]}, {"late": "out-late"}
    sinks.sinks, sinks.txns = {"out": main, "out-late": late}, {"out": "txn-out", "out-late": "txn-late"}
    exit = StageExit(sinks, None)
    doubled = MapOperator(
        lambda b: pa.record_batch({"user_id": b.column(0), "n": pc.multiply(b.column(1), 2)})
    )
    plus = MapOperator(lambda b: pa.record_batch({"user_id": b.column(0), "n": pc.add(b.column(1), 1)}))
    chain = OperatorChain([doubled, plus], exit)
    chain.push(batch(["a", "b", "c"]))
    exit.side("late", batch(["z"]))
    assert [(t, b.column("n").to_pylist()) for t, b in main.written] == [("txn-out", [1, 3, 5])]
    assert [t for t, _ in late.written] == ["txn-late"] and exit.outbox == [] and exit.side_dropped == {}


def test_a_keyed_stage_without_a_stateful_step_or_sink_runs_every_epoch(tmp_path: Path) -> None:
    """Such a stage has no channel-state anchor: a restore replays nothing for it (it could not
    have written any) instead of failing on the missing anchor."""
    job = Job("no-anchor", parallelism=2, max_parallelism=16)
    source = GeneratorSource(uid="c", partitions=2, seed=5, events_per_second=30, keys=20)
    (
        job.source(source, uid="c")
        .key_by("user_id")
        .map(lambda b: b)
        .key_by("page")
        .deduplicate(ttl_ms=1_000, uid="d")
        .sink(ParquetSink(), uid="out")
    )
    clock = ManualClock(DEFAULT_START_MS)
    for _ in range(3):
        clock.advance(10_000)
        assert run_cycle(job, tmp_path.as_uri(), clock).status == "completed"
