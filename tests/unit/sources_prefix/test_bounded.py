"""A thousand small files over fifty epochs: what an epoch reads of the manifest does not grow with
the source's history (the heads are compacted, reads walk back only to the epoch's start)."""

from __future__ import annotations

from tests.unit.sources_prefix.support import SETTLE_MS, Landing, make_source, read_ids, rows

EPOCHS, PER_EPOCH = 50, 20


def test_a_thousand_small_files_keep_the_manifest_read_per_epoch_bounded(landing: Landing) -> None:
    options = {"partitions": 2, "max_file_age_ms": 5 * SETTLE_MS}
    positions = {"p0": 0, "p1": 0}
    got: list[str] = []
    reads: list[int] = []
    read_bytes: list[int] = []
    for epoch in range(EPOCHS + 1):
        if epoch < EPOCHS:
            for i in range(PER_EPOCH):
                n = epoch * PER_EPOCH + i  # each new name sorts before every earlier one
                landing.drop(f"landing/d{n % 3}/f{9_999 - n:04d}.jsonl", rows(n, 1))
        landing.clock.advance(SETTLE_MS)
        source = make_source(landing, **options)  # the trigger runs in a new process: no caches
        ends = source.end_offsets()
        reader = make_source(landing, **options)  # and so do the epoch's tasks
        for partition, end in ends.items():
            got += read_ids(reader, partition, positions[partition], end)
        positions = ends
        reads.append(source.manifest.reads + reader.manifest.reads)
        read_bytes.append(source.manifest.bytes_read + reader.manifest.bytes_read)

    assert sorted(got) == sorted(f"r{n}" for n in range(EPOCHS * PER_EPOCH))  # each exactly once
    steady = slice(10, EPOCHS)
    assert max(reads[steady]) <= 2 + 2 * 3  # two heads to discover; a head and two chunks per read
    assert max(read_bytes[steady]) <= 1.3 * max(read_bytes[3:10])  # no growth with history
    for partition in ("p0", "p1"):
        head = landing.store.get(source.manifest.layout.head(partition)).data
        assert len(head) < 8_000, len(head)
    chunks = list(landing.store.list(source.manifest.layout.root + "manifest/"))
    assert len(chunks) > 2 * (EPOCHS - 5)  # the manifest keeps every chunk; epochs read few of them
