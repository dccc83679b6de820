"""The ObjectStore contract suite: written once, run against every adapter.

Subclass :class:`ObjectStoreContract` with a ``store`` fixture that yields a fresh, empty store.
Every guarantee in ``state_store.core.ports``'s docstring has a test here.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from state_store.core.ports import (
    InvalidKeyError,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStore,
    VersionMismatch,
)


class ObjectStoreContract:
    __test__ = False

    def test_put_then_get_returns_bytes_and_version(self, store: ObjectStore) -> None:
        version = store.put("job/a.bin", b"hello")
        got = store.get("job/a.bin")
        assert got.data == b"hello"
        assert got.version == version
        assert got.key == "job/a.bin"

    def test_get_missing_key_raises_not_found(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFound):
            store.get("job/missing")

    def test_head_reports_size_and_version_or_none(self, store: ObjectStore) -> None:
        assert store.head("job/x") is None
        version = store.put("job/x", b"12345")
        info = store.head("job/x")
        assert info is not None and info.size == 5 and info.version == version

    def test_put_replaces_content_and_changes_version(self, store: ObjectStore) -> None:
        v1 = store.put("k/v", b"one")
        v2 = store.put("k/v", b"two")
        assert v1 != v2
        assert store.get("k/v").data == b"two"

    def test_empty_object_round_trips(self, store: ObjectStore) -> None:
        store.put("k/empty", b"")
        assert store.get("k/empty").data == b""

    def test_the_version_a_create_returns_is_the_one_get_head_and_list_report(
        self, store: ObjectStore
    ) -> None:
        """Ack bundles rely on it: an entry is trusted only while the listing shows the version
        the task's create-only write returned."""
        keys = [f"chk/acks/op/{i:05d}.json" for i in range(3)]
        versions = {key: store.put_if_absent(key, key.encode()) for key in keys}
        assert {info.key: info.version for info in store.list("chk/acks/")} == versions
        for key, version in versions.items():
            info = store.head(key)
            assert info is not None and info.version == version == store.get(key).version

    def test_create_only_refuses_an_existing_key(self, store: ObjectStore) -> None:
        store.put_if_absent("job/chk-1/_pending.json", b"first")
        with pytest.raises(ObjectAlreadyExists):
            store.put_if_absent("job/chk-1/_pending.json", b"second")
        assert store.get("job/chk-1/_pending.json").data == b"first"

    def test_create_only_retry_with_same_bytes_succeeds(self, store: ObjectStore) -> None:
        v1 = store.put_if_absent("job/once", b"same")
        v2 = store.put_if_absent("job/once", b"same")
        assert v1 == v2

    def test_cas_with_current_version_replaces(self, store: ObjectStore) -> None:
        v1 = store.put("job/LATEST", b"1")
        v2 = store.put_if_match("job/LATEST", b"2", v1)
        assert v2 != v1
        assert store.get("job/LATEST").data == b"2"

    def test_stale_cas_is_refused_and_changes_nothing(self, store: ObjectStore) -> None:
        v1 = store.put("job/LATEST", b"1")
        store.put_if_match("job/LATEST", b"2", v1)
        with pytest.raises(VersionMismatch):
            store.put_if_match("job/LATEST", b"3", v1)
        assert store.get("job/LATEST").data == b"2"

    def test_cas_on_missing_key_is_refused(self, store: ObjectStore) -> None:
        with pytest.raises(VersionMismatch):
            store.put_if_match("job/none", b"x", "some-version")
        assert store.head("job/none") is None

    def test_concurrent_create_of_same_id_has_exactly_one_winner(self, store: ObjectStore) -> None:
        barrier = threading.Barrier(8)

        def create(i: int) -> bool:
            barrier.wait()
            try:
                store.put_if_absent("job/checkpoints/chk-0000000007/_pending.json", f"owner-{i}".encode())
                return True
            except ObjectAlreadyExists:
                return False

        with ThreadPoolExecutor(8) as pool:
            wins = list(pool.map(create, range(8)))
        assert wins.count(True) == 1
        winner = wins.index(True)
        assert store.get("job/checkpoints/chk-0000000007/_pending.json").data == f"owner-{winner}".encode()

    def test_concurrent_cas_from_same_version_has_exactly_one_winner(self, store: ObjectStore) -> None:
        v0 = store.put("job/ptr", b"0")
        barrier = threading.Barrier(8)

        def swap(i: int) -> bool:
            barrier.wait()
            try:
                store.put_if_match("job/ptr", f"{i + 1}".encode(), v0)
                return True
            except VersionMismatch:
                return False

        with ThreadPoolExecutor(8) as pool:
            wins = list(pool.map(swap, range(8)))
        assert wins.count(True) == 1
        assert store.get("job/ptr").data == f"{wins.index(True) + 1}".encode()

    def test_list_is_a_string_prefix_in_key_order(self, store: ObjectStore) -> None:
        for key in ["j/b/2", "j/a/1", "j/ab", "j/b/1", "k/x"]:
            store.put(key, key.encode())
        assert [i.key for i in store.list("j/")] == ["j/a/1", "j/ab", "j/b/1", "j/b/2"]
        assert [i.key for i in store.list("j/a")] == ["j/a/1", "j/ab"]
        assert [i.key for i in store.list("j/b/")] == ["j/b/1", "j/b/2"]
        assert [i.key for i in store.list("nothing/")] == []
        sizes = {i.key: i.size for i in store.list("j/")}
        assert sizes["j/ab"] == 4

    def test_delete_is_idempotent(self, store: ObjectStore) -> None:
        store.put("j/d", b"x")
        store.delete("j/d")
        store.delete("j/d")
        assert store.head("j/d") is None
        assert list(store.list("j/")) == []

    def test_delete_keeps_siblings(self, store: ObjectStore) -> None:
        store.put("j/dir/a", b"a")
        store.put("j/dir/b", b"b")
        store.delete("j/dir/a")
        assert [i.key for i in store.list("j/")] == ["j/dir/b"]
        store.delete("j/dir/b")
        store.put("j/dir/c", b"c")
        assert store.get("j/dir/c").data == b"c"

    @pytest.mark.parametrize("bad", ["../x", "/abs", "a//b", "a/./b", "a/../b", "a\\b", "", "a/", "a b"])
    def test_unsafe_keys_are_refused(self, store: ObjectStore, bad: str) -> None:
        with pytest.raises(InvalidKeyError):
            store.put(bad, b"x")
        with pytest.raises(InvalidKeyError):
            store.get(bad)

    def test_uri_is_printable_and_names_the_store(self, store: ObjectStore) -> None:
        assert "://" in store.uri
