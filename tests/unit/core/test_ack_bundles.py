"""Ack bundles (issue 9, S6): completion reads one bundle instead of one ack per subtask, with the
same decision, and a bundle that is stale, torn, foreign or missing changes nothing but the reads."""

from __future__ import annotations

import dataclasses

from state_store.core import documents
from state_store.core.ack_bundles import read_acks, write_ack_bundle
from state_store.core.manifests import AckBundleEntry, AckBundleRecord, AckRecord
from tests.unit.core.helpers import Job
from tests.unit.core.test_coordinator_reads import ACKS, TASKS, CountingStore, acked_job, counting


def bundle(job: Job, n: int, entries: list[AckBundleEntry] | None = None) -> str:
    pending = job.coordinator.pending_record(n)
    key = write_ack_bundle(
        counting(job).inner,
        job.coordinator.layout,
        n,
        pending.generation,
        1,
        job.responder.receipts if entries is None else entries,
    )
    assert key is not None
    return key


def ack_gets(store: CountingStore) -> int:
    return sum(count for key, count in store.keys.items() if "/acks/" in key)


def test_the_responder_keeps_a_receipt_of_each_ack_it_created_with_the_store_version() -> None:
    job, n = acked_job(16)
    receipts = job.responder.receipts
    assert len(receipts) == ACKS
    listed = {
        info.key: info.version for info in counting(job).inner.list(job.coordinator.layout.acks_prefix(n))
    }
    assert {r.key: r.version for r in receipts} == listed
    for receipt in receipts:
        assert receipt.document.encode() == counting(job).inner.get(receipt.key).data


def test_completion_with_a_bundle_reads_no_ack_and_decides_exactly_as_without() -> None:
    plain, n = acked_job(16)
    bundled, m = acked_job(16)
    assert n == m
    key = bundle(bundled, m)
    assert key.startswith(bundled.coordinator.layout.ack_bundles_prefix(m))
    counting(bundled).reset()
    without, with_bundle = plain.coordinator.complete(n), bundled.coordinator.complete(m)
    assert with_bundle.status == without.status == "completed"
    assert (with_bundle.acked, with_bundle.ack_results) == (without.acked, without.ack_results)
    assert with_bundle.checkpoint is not None and without.checkpoint is not None
    assert with_bundle.checkpoint.metadata == without.checkpoint.metadata
    assert ack_gets(counting(plain)) == ACKS
    assert ack_gets(counting(bundled)) == 0
    assert counting(bundled).keys[key] == 1  # the bundle, read once


def test_an_entry_whose_version_no_longer_matches_is_read_from_the_store() -> None:
    job, n = acked_job(16)
    store = counting(job)
    entries = list(job.responder.receipts)
    stale = entries[3]
    entries[3] = dataclasses.replace(stale, version="not-the-listed-version")
    bundle(job, n, entries)
    store.reset()
    assert all(isinstance(ack, AckRecord) for _, ack in read_acks(store, job.coordinator.layout, n))
    assert ack_gets(store) == 1 and store.keys[stale.key] == 1


def test_a_bundle_can_neither_add_an_ack_nor_override_the_listed_document() -> None:
    job, n = acked_job(16)
    store = counting(job)
    layout = job.coordinator.layout
    victim = job.responder.receipts[10]
    # the ack document is replaced behind the bundle's back: its version changes, the listing wins
    store.inner.put(victim.key, b"{torn")
    # and the bundle vouches for an ack that was never written
    ghost_record = documents.decode(victim.document.encode(), AckRecord, key=victim.key)
    ghost_key = victim.key.replace("/00010-", "/99999-")
    ghost = AckBundleEntry(ghost_key, "v-ghost", documents.encode(ghost_record).decode())
    bundle(job, n, [*job.responder.receipts, ghost])
    reads = dict(read_acks(store, layout, n))
    assert ghost_key not in reads and len(reads) == ACKS
    assert isinstance(reads[victim.key], str) and reads[victim.key].startswith("corrupt: ")
    result = job.coordinator.complete(n)
    assert result.status == "in_progress" and result.acked == ACKS - 1


def test_a_torn_entry_falls_back_to_the_store_and_a_torn_bundle_is_ignored() -> None:
    job, n = acked_job(16)
    store = counting(job)
    entries = list(job.responder.receipts)
    torn = entries[0].document.replace('"records":1', '"records":2')
    assert torn != entries[0].document
    entries[0] = dataclasses.replace(entries[0], document=torn)
    bundle(job, n, entries)
    torn_key = job.coordinator.layout.ack_bundle(n, 0, 1, "torn")
    store.inner.put(torn_key, b'{"format_version": 1, "kind": "ack_bundle"')  # a torn second bundle
    store.reset()
    reads = dict(read_acks(store, job.coordinator.layout, n))
    first = reads[entries[0].key]
    assert isinstance(first, AckRecord) and first.metrics == {"records": 1}  # the document, not the entry
    assert ack_gets(store) == 1
    assert job.coordinator.complete(n).status == "completed"


def test_a_bundle_of_another_checkpoint_is_not_used() -> None:
    job, n = acked_job(16)
    store = counting(job)
    layout = job.coordinator.layout
    foreign = AckBundleRecord(n + 1, 0, 1, tuple(job.responder.receipts))
    documents.create(store.inner, layout.ack_bundle(n, 0, 1, "copied"), foreign)
    store.reset()
    assert len(read_acks(store, layout, n)) == ACKS
    assert ack_gets(store) == ACKS


def test_nothing_to_bundle_writes_nothing_and_duplicates_collapse() -> None:
    job, n = acked_job(16)
    layout = job.coordinator.layout
    assert write_ack_bundle(counting(job).inner, layout, n, 0, 1, []) is None
    assert list(counting(job).inner.list(layout.ack_bundles_prefix(n))) == []
    twice = [*job.responder.receipts, *job.responder.receipts[:5]]
    key = bundle(job, n, twice)
    record = documents.read(counting(job).inner, key, AckBundleRecord)
    assert len(record.acks) == len(TASKS) and [e.key for e in record.acks] == sorted(
        e.key for e in record.acks
    )
