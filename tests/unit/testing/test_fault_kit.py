"""The fault kit does what its docstrings say (it is part of the product, STYLE.md)."""

from __future__ import annotations

import pytest

from state_store.core import TransientStoreError
from state_store.core.ports import NO_KILL, ObjectNotFound, StorageFullError
from state_store.faults import InvalidFaultSpec, kill_switch_from_env
from state_store.storage import MemoryObjectStore
from state_store.testing import (
    Fault,
    FaultyObjectStore,
    KillAt,
    ManualClock,
    SimulatedCrash,
)


def faulty(*faults: Fault) -> FaultyObjectStore:
    return FaultyObjectStore(MemoryObjectStore("fk"), list(faults), sleep=lambda s: None)


@pytest.mark.parametrize("kind", ["error", "throttle", "timeout"])
def test_transient_faults_fail_before_writing(kind: str) -> None:
    store = faulty(Fault(kind, key_glob="job/*"))
    with pytest.raises(TransientStoreError):
        store.put("job/a", b"x")
    assert store.inner.head("job/a") is None
    store.put("job/a", b"x")  # times=1: the next call goes through
    assert store.get("job/a").data == b"x"


def test_lost_response_writes_then_raises() -> None:
    store = faulty(Fault("lost_response", ops=frozenset({"put_if_absent"})))
    with pytest.raises(TransientStoreError, match="lost response"):
        store.put_if_absent("job/p", b"data")
    assert store.inner.get("job/p").data == b"data"
    assert store.put_if_absent("job/p", b"data")  # the caller's retry is idempotent


def test_torn_write_leaves_a_prefix_and_bitflip_corrupts_silently() -> None:
    store = faulty(Fault("torn", key_glob="*/_metadata.json"), Fault("bitflip", key_glob="*.arrow"))
    with pytest.raises(TransientStoreError):
        store.put("j/_metadata.json", b"0123456789")
    assert store.inner.get("j/_metadata.json").data == b"01234"
    store.put("j/s.arrow", b"\x00" * 8)
    assert store.inner.get("j/s.arrow").data != b"\x00" * 8


def test_disk_full_and_latency() -> None:
    slept: list[float] = []
    store = FaultyObjectStore(
        MemoryObjectStore("fk2"),
        [Fault("disk_full", times=1), Fault("latency", latency_s=0.25, times=2)],
        sleep=slept.append,
    )
    with pytest.raises(StorageFullError):
        store.put("a/b", b"x")
    store.put("a/b", b"x")
    store.get("a/b")
    assert slept == [0.25, 0.25]
    with pytest.raises(ObjectNotFound):
        store.get("a/none")


def test_probabilistic_faults_are_reproducible_from_the_seed() -> None:
    def run(seed: int) -> list[tuple[str, str, str]]:
        store = FaultyObjectStore(
            MemoryObjectStore("fk3"), [Fault("error", times=-1, probability=0.3)], seed=seed
        )
        for i in range(50):
            try:
                store.put(f"k/{i}", b"x")
            except TransientStoreError:
                pass
        return store.injected

    assert run(7) == run(7) and run(7) != run(8) and 5 < len(run(7)) < 30


def test_unknown_fault_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown"):
        Fault("meteor")


def test_kill_switch_from_env() -> None:
    assert kill_switch_from_env({}) is NO_KILL
    switch = kill_switch_from_env({"EPOCHAL_FAULT": "after_metadata@3"})
    switch("after_metadata", 2)
    with pytest.raises(SimulatedCrash, match="after_metadata"):
        switch("after_metadata", 3)
    switch("after_metadata", 3)  # fires once
    with pytest.raises(InvalidFaultSpec, match="does not exist: use one of"):
        kill_switch_from_env({"EPOCHAL_FAULT": "after_lunch"})
    with pytest.raises(InvalidFaultSpec, match="checkpoint_id"):
        kill_switch_from_env({"EPOCHAL_FAULT": "after_ack@x"})
    assert isinstance(KillAt("after_ack"), KillAt)


def test_manual_clock_moves_only_forward() -> None:
    clock = ManualClock(1000)
    assert clock.advance(5) == 1005 == clock.now_ms()
    with pytest.raises(ValueError):
        clock.advance(-1)
