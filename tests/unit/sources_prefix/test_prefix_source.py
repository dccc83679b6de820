"""PrefixSource on the memory and the local store: admission, offsets, replay, deletion and change."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.sources.base import OFFSET_COLUMN, ReplayableSource, read_table
from spark_jobs.sources.dead_letters import DeadLetterReason, DeadLetters
from spark_jobs.sources.errors import MalformedRecordError, OffsetOutOfRangeError
from spark_jobs.sources.prefix import PrefixSource
from spark_jobs.sources.prefix_errors import (
    FileChangedError,
    FileMissingError,
    PrefixSourceError,
    SourceDefinitionChangedError,
    UnreadableFileError,
)
from state_store.storage import LocalObjectStore
from state_store.testing import ManualClock
from tests.unit.sources_prefix.support import (
    SCHEMA,
    SETTLE_MS,
    T0,
    Landing,
    encode,
    make_source,
    read_all,
    read_ids,
    rows,
    settle,
)


def ids(first: int, count: int) -> list[str]:
    return [f"r{n}" for n in range(first, first + count)]


def one_line(error: pytest.ExceptionInfo[BaseException], *words: str) -> None:
    message = str(error.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, (word, message)


def test_it_is_a_replayable_source(landing: Landing) -> None:
    source = make_source(landing)
    assert isinstance(source, ReplayableSource)
    assert source.partitions() == ["p0", "p1"]
    assert source.end_offsets() == {"p0": 0, "p1": 0}


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_every_format_reads_each_record_at_its_offset(landing: Landing, fmt: str) -> None:
    source = make_source(landing, format=fmt, partitions=1)
    landing.drop(f"landing/b.{fmt}", rows(0, 4), fmt)
    landing.clock.advance(1)  # newer: admitted after b although its name sorts first
    landing.drop(f"landing/a.{fmt}", rows(4, 3), fmt)
    assert settle(landing, source) == {"p0": 7}
    table = read_table(source, "p0", 0, 7, chunk_size=2)
    assert table.schema.names == [OFFSET_COLUMN, *SCHEMA.names]
    assert table.column(OFFSET_COLUMN).to_pylist() == list(range(7))
    assert (
        table.drop_columns([OFFSET_COLUMN]).to_pylist()
        == pa.Table.from_pylist(rows(0, 7), SCHEMA).to_pylist()
    )
    assert read_ids(source, "p0", 2, 5) == ids(2, 3)  # a range across the two files
    assert read_ids(source, "p0", 4, 4) == []


def test_files_appearing_between_end_offsets_and_read_wait_for_the_next_epoch(landing: Landing) -> None:
    source = make_source(landing, partitions=1)
    landing.drop("landing/m.jsonl", rows(0, 3))
    ends = settle(landing, source)
    assert ends == {"p0": 3}
    landing.drop("landing/a-late.jsonl", rows(3, 2))  # sorts before m.jsonl, arrives mid-epoch
    landing.clock.advance(10 * SETTLE_MS)
    assert read_ids(source, "p0", 0, ends["p0"]) == ids(0, 3)  # the epoch reads what it fixed
    assert settle(landing, source) == {"p0": 5}
    assert read_ids(source, "p0", 3, 5) == ids(3, 2)
    assert read_ids(source, "p0", 0, 3) == ids(0, 3)  # earlier offsets still mean the same rows


def test_a_young_file_waits_for_the_settle_time(landing: Landing) -> None:
    source = make_source(landing, partitions=1)
    landing.drop("landing/new.jsonl", rows(0, 3))
    assert source.end_offsets() == {"p0": 0}
    landing.clock.advance(SETTLE_MS - 1)
    assert source.end_offsets() == {"p0": 0}  # unchanged since the last listing, but too young
    landing.clock.advance(1)
    assert source.end_offsets() == {"p0": 3}
    assert read_ids(source, "p0", 0, 3) == ids(0, 3)


def test_a_growing_file_waits_until_two_listings_see_it_unchanged(landing: Landing) -> None:
    source = make_source(landing, partitions=1)
    whole, old = encode("jsonl", rows(0, 3)), 10 * SETTLE_MS  # the producer's clock is far behind
    landing.put("landing/grow.jsonl", whole[:20], behind_ms=old)  # half a record, "old" already
    assert source.end_offsets() == {"p0": 0}  # first sight: not confirmed yet
    landing.put("landing/grow.jsonl", whole[:50], behind_ms=old)
    assert source.end_offsets() == {"p0": 0}  # grew since the last listing
    landing.put("landing/grow.jsonl", whole, behind_ms=old)
    assert source.end_offsets() == {"p0": 0}  # grew again
    assert source.end_offsets() == {"p0": 3}  # unchanged over two listings
    assert read_ids(source, "p0", 0, 3) == ids(0, 3)


def test_without_listing_confirmation_a_settled_file_is_admitted_on_first_sight(landing: Landing) -> None:
    source = make_source(landing, partitions=1, confirm_listing=False)
    landing.drop("landing/x.jsonl", rows(0, 2))
    assert source.end_offsets() == {"p0": 0}
    landing.clock.advance(SETTLE_MS)
    assert source.end_offsets() == {"p0": 2}


def test_same_file_name_in_different_partition_folders(landing: Landing) -> None:
    source = make_source(landing, partitions="folder")
    landing.drop("landing/day=1/part-0.jsonl", rows(0, 2))
    landing.drop("landing/day=2/part-0.jsonl", rows(2, 3))
    landing.drop("landing/day=2/sub/part-0.jsonl", rows(5, 1))  # deeper folders: the first one counts
    landing.drop("landing/loose.jsonl", rows(90, 1))  # not in a folder: ignored (logged)
    landing.put("landing/day=1/_SUCCESS", b"")
    landing.drop("landing/day=1/.part-1.jsonl.crc", rows(91, 1))
    landing.drop("landing/_temporary/day=1/x.jsonl", rows(92, 1))
    assert source.partitions() == []
    assert settle(landing, source) == {"day=1": 2, "day=2": 4}
    assert source.partitions() == ["day=1", "day=2"]
    assert read_ids(source, "day=1", 0, 2) == ids(0, 2)
    assert read_ids(source, "day=2", 0, 4) == ids(2, 4)


def test_hash_partitions_assign_files_by_their_whole_path(landing: Landing) -> None:
    source = make_source(landing, partitions=4)
    for day in range(6):
        landing.drop(f"landing/day={day}/part-0.jsonl", rows(day * 2, 2))
    ends = settle(landing, source)
    assert sum(ends.values()) == 12
    assert sorted(read_all(source, ends)) == sorted(ids(0, 12))
    for day in range(6):
        partition = source.partition_of(f"day={day}/part-0.jsonl")
        assert partition in source.partitions()
        assert f"r{day * 2}" in read_ids(source, str(partition), 0, ends[str(partition)])
    assert len({source.partition_of(f"day={d}/part-0.jsonl") for d in range(6)}) > 1


def test_a_crash_mid_epoch_then_a_new_instance_replays_exactly_the_same_rows(landing: Landing) -> None:
    first = make_source(landing, partitions=2)
    for n in range(6):
        landing.drop(f"landing/f{n}.jsonl", rows(n * 5, 5))
    positions = {"p0": 0, "p1": 0}  # the latest completed checkpoint
    barrier = settle(landing, first)  # the epoch's trigger fixed these ends
    partly = first.read("p0", positions["p0"], barrier["p0"], chunk_size=2)
    taken = next(partly)  # the epoch dies here
    assert taken.num_rows == 2
    landing.drop("landing/0-during-crash.jsonl", rows(30, 4))  # sorts first, arrives meanwhile
    landing.clock.advance(10 * SETTLE_MS)

    replay = make_source(landing, partitions=2)  # the restarted process
    for partition in ("p0", "p1"):
        again = read_table(replay, partition, positions[partition], barrier[partition], chunk_size=4)
        once = read_table(first, partition, positions[partition], barrier[partition], chunk_size=7)
        assert again.equals(once)
    assert read_table(replay, "p0", 0, 2).to_batches()[0].equals(taken)
    after = settle(landing, replay)
    assert sum(after.values()) == 34
    everything = read_all(replay, barrier, positions) + read_all(replay, after, barrier)
    assert sorted(everything) == sorted(ids(0, 34))


def test_a_crash_between_chunk_and_head_is_rolled_forward(landing: Landing) -> None:
    source = make_source(landing, partitions=1)
    landing.drop("landing/a.jsonl", rows(0, 3))
    settle(landing, source, rounds=1)
    head_key = source.manifest.layout.head("p0")
    before = landing.store.get(head_key).data
    landing.clock.advance(SETTLE_MS)
    assert source.end_offsets() == {"p0": 3}
    landing.store.put(head_key, before)  # the head never moved: the writer died after the chunk
    fresh = make_source(landing, partitions=1)
    assert read_ids(fresh, "p0", 0, 3) == ids(0, 3)
    assert fresh.end_offsets() == {"p0": 3}  # the chunk counts; the file is not admitted twice
    assert fresh.manifest.load_head("p0")[2].end == 3  # and the head has caught up


def test_a_file_deleted_after_it_was_read_fails_its_replay_with_a_one_line_remedy(landing: Landing) -> None:
    source = make_source(landing, partitions=1)
    landing.drop("landing/a.jsonl", rows(0, 3))
    landing.drop("landing/b.jsonl", rows(3, 2))
    assert settle(landing, source) == {"p0": 5}
    assert read_ids(source, "p0", 0, 5) == ids(0, 5)
    landing.delete("landing/a.jsonl")  # the producer cleans up after the epoch
    landing.drop("landing/c.jsonl", rows(5, 2))
    assert settle(landing, source) == {"p0": 7}  # later epochs do not care
    assert read_ids(source, "p0", 5, 7) == ids(5, 2)
    assert read_ids(source, "p0", 3, 5) == ids(3, 2)
    with pytest.raises(FileMissingError) as error:
        read_ids(source, "p0", 0, 5)  # a replay from an older checkpoint
    one_line(error, "landing/a.jsonl", "[0, 3)", "restore it", "on_missing_file='skip'")
    assert error.value.path == "landing/a.jsonl"

    skipping = make_source(landing, partitions=1, on_missing_file="skip")
    dead = DeadLetters()
    assert read_ids(skipping, "p0", 1, 5, dead) == ids(3, 2)  # b keeps its offsets
    assert dead.offsets("p0") == [1, 2]
    assert dead.count(DeadLetterReason.MISSING_FIELD) == 2
    assert "deleted" in dead.letters[0].detail


def test_a_file_changed_after_admission_is_refused(landing: Landing) -> None:
    source = make_source(landing, partitions=1)
    landing.drop("landing/a.jsonl", rows(0, 3))
    assert settle(landing, source) == {"p0": 3}
    landing.clock.advance(1)
    landing.drop("landing/a.jsonl", rows(0, 3))  # the same bytes written again: still fine
    assert read_ids(source, "p0", 0, 3) == ids(0, 3)
    landing.drop("landing/a.jsonl", rows(10, 4))
    with pytest.raises(FileChangedError) as error:
        read_ids(source, "p0", 0, 3)
    one_line(error, "landing/a.jsonl", "changed after it was admitted", "new names")
    assert settle(landing, source) == {"p0": 3}  # a rewritten file is never admitted again


def test_an_unreadable_file_fails_the_round_and_admits_nothing(landing: Landing) -> None:
    source = make_source(landing, partitions=1, format="parquet")
    landing.drop("landing/good.parquet", rows(0, 3), "parquet")
    landing.put("landing/bad.parquet", b"PAR1 this is no parquet file")
    settle(landing, source, rounds=1)
    landing.clock.advance(SETTLE_MS)
    with pytest.raises(UnreadableFileError) as error:
        source.end_offsets()
    one_line(error, "landing/bad.parquet", "parquet", "remove it", "on_unreadable_file='dead_letter'")
    assert source.manifest.load_head("p0")[0].end == 0  # nothing consumed

    lenient = make_source(landing, partitions=1, format="parquet", on_unreadable_file="dead_letter")
    assert lenient.end_offsets() == {"p0": 4}  # bad.parquet holds one offset, dead-lettered
    dead = DeadLetters()
    assert read_ids(lenient, "p0", 0, 4, dead) == ids(0, 3)
    assert [(d.offset, d.raw) for d in dead] == [(0, "landing/bad.parquet")]
    with pytest.raises(MalformedRecordError, match=r"bad\.parquet"):
        read_ids(lenient, "p0", 0, 4)  # without a collector the dead letter raises


def test_invalid_utf8_csv_is_unreadable_and_bad_rows_are_dead_letters(landing: Landing) -> None:
    source = make_source(landing, partitions=1, format="csv")
    text = "id,event_time,value\nr0,2023-11-14T22:13:20Z,1\nr1,1700000000001,not-a-number\n\nr2,x\n"
    landing.put("landing/a.csv", text.encode())
    assert settle(landing, source) == {"p0": 3}  # the blank line is not a record
    dead = DeadLetters()
    assert read_ids(source, "p0", 0, 3, dead) == ["r0"]
    assert [(d.offset, d.reason) for d in dead] == [
        (1, DeadLetterReason.BAD_TYPE),
        (2, DeadLetterReason.BAD_TYPE),  # short row: event_time 'x'
    ]
    landing.put("landing/b.csv", b"id,event_time\n\xff\xfe,1\n")
    settle(landing, source, rounds=1)
    with pytest.raises(UnreadableFileError) as error:
        settle(landing, source, rounds=1)
    one_line(error, "landing/b.csv", "UTF-8")


def test_malformed_json_lines_keep_their_offsets(landing: Landing) -> None:
    source = make_source(landing, partitions=1)
    body = encode("jsonl", rows(0, 2)) + b"{not json\n\r\n[1]\n" + encode("jsonl", rows(2, 1))
    landing.put("landing/a.jsonl", body)
    assert settle(landing, source) == {"p0": 5}
    dead = DeadLetters()
    assert read_ids(source, "p0", 0, 5, dead) == ["r0", "r1", "r2"]
    assert [(d.offset, d.reason) for d in dead] == [
        (2, DeadLetterReason.INVALID_JSON),
        (3, DeadLetterReason.NOT_AN_OBJECT),
    ]


def admitted(source: PrefixSource) -> set[str]:
    """Paths of every file in the source's manifest."""
    paths = set()
    for partition in source.partitions():
        head = source.manifest.load_head(partition)[0]
        paths |= {f.path for f in source.manifest.covering(head, 0, head.end)}
    return paths


def test_max_files_per_epoch_admits_the_oldest_first(landing: Landing) -> None:
    source = make_source(landing, partitions=2, max_files_per_epoch=3)
    for n in range(7):
        landing.drop(f"landing/{9 - n}.jsonl", rows(n, 1))  # names in reverse age order
        landing.clock.advance(1)
    settle(landing, source, rounds=1)
    assert sum(settle(landing, source, rounds=1).values()) == 3
    assert admitted(source) == {"9.jsonl", "8.jsonl", "7.jsonl"}
    totals = [sum(settle(landing, source, rounds=1).values()) for _ in range(3)]
    assert totals == [6, 7, 7]
    assert sorted(read_all(source, source.end_offsets())) == ids(0, 7)


def test_max_bytes_per_epoch_caps_a_round_but_always_takes_one_file(landing: Landing) -> None:
    size = len(encode("jsonl", rows(0, 1)))
    source = make_source(landing, partitions=1, max_bytes_per_epoch=2 * size, max_files_per_epoch=None)
    landing.drop("landing/big.jsonl", rows(0, 5))  # larger than the cap
    landing.clock.advance(1)
    for n in range(5, 8):
        landing.drop(f"landing/s{n}.jsonl", rows(n, 1))
    settle(landing, source, rounds=1)
    ends = [settle(landing, source, rounds=1)["p0"] for _ in range(3)]
    assert ends == [5, 7, 8]
    assert read_ids(source, "p0", 0, 8) == ids(0, 8)


def test_reading_past_the_manifest_end_is_refused(landing: Landing) -> None:
    source = make_source(landing, partitions=1)
    landing.drop("landing/a.jsonl", rows(0, 2))
    settle(landing, source)
    with pytest.raises(OffsetOutOfRangeError, match="ends at offset 2"):
        read_ids(source, "p0", 0, 3)


def test_reopening_with_another_partitioning_is_refused(landing: Landing) -> None:
    make_source(landing, partitions=2).end_offsets()
    with pytest.raises(SourceDefinitionChangedError) as error:
        make_source(landing, partitions=3).end_offsets()
    one_line(error, "hash:2", "hash:3", "new source uid")


def test_a_manifest_inside_the_landing_prefix_is_refused(landing: Landing) -> None:
    with pytest.raises(ValueError, match="landing prefix of its own"):
        make_source(landing, prefix="")
    with pytest.raises(ValueError, match="landing prefix of its own"):
        make_source(landing, prefix="j")


def test_a_source_opened_from_uris_pickles_for_spark_executors(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    landing = Landing(LocalObjectStore(tmp_path / "landing", fsync=False), clock)
    landing.drop("in/a.jsonl", rows(0, 3))
    source = PrefixSource(
        "files",
        (tmp_path / "landing").as_uri(),
        "in",
        job_id="j",
        schema=SCHEMA,
        format="jsonl",
        settle_ms=0,
        confirm_listing=False,
        state_store=(tmp_path / "job").as_uri(),
        clock=None,
    )
    ends = source.end_offsets()
    clone = pickle.loads(pickle.dumps(source))
    assert sorted(read_all(clone, ends)) == ids(0, 3)
    assert (tmp_path / "job" / "j" / "sources" / "files" / "_source.json").exists()


def test_a_file_deleted_before_admission_is_never_read(landing: Landing) -> None:
    source = make_source(landing, partitions=1)
    landing.drop("landing/gone.jsonl", rows(0, 2))
    landing.drop("landing/kept.jsonl", rows(2, 2))
    settle(landing, source, rounds=1)
    landing.delete("landing/gone.jsonl")
    assert settle(landing, source) == {"p0": 2}
    assert read_ids(source, "p0", 0, 2) == ids(2, 2)
    assert [p.path for p in source.manifest.load_head("p0")[0].pending] == []


def test_a_file_name_the_store_cannot_address_is_one_line_naming_it(tmp_path: Path) -> None:
    landing = Landing(LocalObjectStore(tmp_path / "store", fsync=False), ManualClock(T0))
    (tmp_path / "store" / "landing").mkdir(parents=True)
    (tmp_path / "store" / "landing" / "my file.jsonl").write_bytes(encode("jsonl", rows(0, 1)))
    with pytest.raises(PrefixSourceError) as error:
        make_source(landing).end_offsets()
    one_line(error, "my file.jsonl", "rename it")
