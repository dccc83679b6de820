"""S3ObjectStore against a real SeaweedFS: the S3-specific behaviour the generic contract cannot see.

(The generic ObjectStore contract suite is run against this adapter separately.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from state_store.core.ports import (
    ObjectAlreadyExists,
    StoreError,
    TransientStoreError,
    VersionMismatch,
)
from state_store.storage.s3 import S3ObjectStore
from state_store.testing.seaweedfs import SeaweedFSServer

pytestmark = pytest.mark.integration

BUCKET = "epochal-test"


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def _lose_first_put_response(client: Any) -> list[int]:
    """Make botocore retry the first successful PutObject as if its response had been lost."""
    lost: list[int] = []

    def handler(attempts: int, response: Any = None, **_: Any) -> float | None:
        if not lost and attempts == 1 and response is not None and response[0].status_code == 200:
            lost.append(attempts)
            return 0.01  # seconds to sleep before the retry
        return None

    client.meta.events.register_first("needs-retry.s3.PutObject", handler)
    return lost


# -- conditional writes -------------------------------------------------------------------------
def test_server_answers_412_to_conditional_writes_that_do_not_hold(seaweedfs: SeaweedFSServer) -> None:
    seaweedfs.make_store(BUCKET)  # creates the bucket
    client, key = seaweedfs.client(), f"{_prefix()}/raw"
    etag = client.put_object(Bucket=BUCKET, Key=key, Body=b"1", IfNoneMatch="*")["ETag"]
    client.put_object(Bucket=BUCKET, Key=key, Body=b"2", IfMatch=etag)
    conditions: list[dict[str, Any]] = [{"IfNoneMatch": "*"}, {"IfMatch": etag}]
    for condition in conditions:
        with pytest.raises(ClientError) as caught:
            client.put_object(Bucket=BUCKET, Key=key, Body=b"3", **condition)
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        assert caught.value.response["Error"]["Code"] == "PreconditionFailed"


def test_create_only_refuses_existing_key_with_other_bytes(s3_store: S3ObjectStore) -> None:
    s3_store.put_if_absent("job/chk-1/_pending.json", b"owner-a")
    with pytest.raises(ObjectAlreadyExists, match="already exists"):
        s3_store.put_if_absent("job/chk-1/_pending.json", b"owner-b")
    assert s3_store.get("job/chk-1/_pending.json").data == b"owner-a"


def test_create_only_repeated_with_same_bytes_returns_the_same_version(s3_store: S3ObjectStore) -> None:
    first = s3_store.put_if_absent("job/once", b"same")
    assert s3_store.put_if_absent("job/once", b"same") == first
    with pytest.raises(ObjectAlreadyExists):
        s3_store.put_if_absent("job/once", b"other")


def test_stale_cas_is_refused_and_leaves_the_newer_content(s3_store: S3ObjectStore) -> None:
    v1 = s3_store.put("job/LATEST", b"1")
    s3_store.put_if_match("job/LATEST", b"2", v1)
    with pytest.raises(VersionMismatch):
        s3_store.put_if_match("job/LATEST", b"3", v1)
    assert s3_store.get("job/LATEST").data == b"2"


def test_versions_from_head_and_list_are_accepted_by_cas(s3_store: S3ObjectStore) -> None:
    s3_store.put("job/LATEST", b"1")
    head = s3_store.head("job/LATEST")
    assert head is not None and '"' not in head.version
    v2 = s3_store.put_if_match("job/LATEST", b"2", head.version)
    [listed] = s3_store.list("job/LATEST")
    assert listed.version == v2 == s3_store.get("job/LATEST").version
    s3_store.put_if_match("job/LATEST", b"3", listed.version)
    assert s3_store.get("job/LATEST").data == b"3"


def test_create_whose_response_was_lost_succeeds_on_botocore_retry(seaweedfs: SeaweedFSServer) -> None:
    client = seaweedfs.client()
    lost = _lose_first_put_response(client)
    store = seaweedfs.make_store(BUCKET, _prefix(), client=client)
    version = store.put_if_absent("job/chk-2/_metadata.json", b"meta")
    assert lost == [1]  # the server saw two creates; the second got 412
    assert store.get("job/chk-2/_metadata.json").version == version


def test_cas_whose_response_was_lost_succeeds_on_botocore_retry(seaweedfs: SeaweedFSServer) -> None:
    client = seaweedfs.client()
    store = seaweedfs.make_store(BUCKET, _prefix(), client=client)
    v1 = store.put("job/LATEST", b"1")
    lost = _lose_first_put_response(client)
    v2 = store.put_if_match("job/LATEST", b"2", v1)
    assert lost == [1]
    assert store.get("job/LATEST").version == v2


def test_create_only_of_a_key_that_is_a_folder_names_the_cause(s3_store: S3ObjectStore) -> None:
    s3_store.put("job/savepoints/sp/_metadata.json", b"{}")
    with pytest.raises(StoreError, match="folder of other keys") as caught:
        s3_store.put_if_absent("job/savepoints/sp", b"x")
    assert not isinstance(caught.value, ObjectAlreadyExists)


def test_conditional_request_conflict_409_is_retried(seaweedfs: SeaweedFSServer) -> None:
    client = seaweedfs.client()  # SeaweedFS never answers 409: script the answers instead
    store = S3ObjectStore(BUCKET, endpoint_url=seaweedfs.endpoint_url, client=client)
    with Stubber(client) as stub:
        for _ in range(2):
            stub.add_client_error("put_object", "ConditionalRequestConflict", http_status_code=409)
        stub.add_response("put_object", {"ETag": '"abc"'})
        assert store.put_if_absent("job/chk-3/_pending.json", b"x") == "abc"
        stub.assert_no_pending_responses()


def test_throttling_left_after_retries_is_transient_and_names_key_and_store(
    seaweedfs: SeaweedFSServer,
) -> None:
    client = seaweedfs.client()
    store = S3ObjectStore(BUCKET, "p", endpoint_url=seaweedfs.endpoint_url, client=client)
    with Stubber(client) as stub:
        stub.add_client_error("get_object", "SlowDown", "Please reduce your request rate.", 503)
        with pytest.raises(TransientStoreError) as caught:
            store.get("job/LATEST")
    assert "'job/LATEST'" in str(caught.value) and store.uri in str(caught.value)
    assert "SlowDown" in str(caught.value)


# -- listing ----------------------------------------------------------------------------------------
def test_listing_more_than_1000_keys_paginates_in_key_order(seaweedfs: SeaweedFSServer) -> None:
    client = seaweedfs.client()
    calls: list[str] = []
    client.meta.events.register("after-call.s3.ListObjectsV2", lambda **_: calls.append("page"))
    store = seaweedfs.make_store(BUCKET, _prefix(), client=client)
    keys = [f"job/acks/op/{i:05d}.json" for i in range(1100)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda key: store.put(key, b"{}"), keys))
    listed = [info.key for info in store.list("job/acks/")]
    assert listed == keys
    assert len(calls) >= 2


def test_listing_is_in_binary_key_order_although_seaweedfs_lists_folders_first(
    s3_store: S3ObjectStore,
) -> None:
    keys = ["j/a/x", "j/a-b", "j/a.c", "j/a0", "j/a", "j/a/y/z", "j/a=1"]
    for key in keys:
        s3_store.put(key, b"x")
    assert [info.key for info in s3_store.list("j/")] == sorted(keys)


# -- errors and secrets -----------------------------------------------------------------------------
def test_missing_bucket_error_says_what_to_do(seaweedfs: SeaweedFSServer) -> None:
    store = S3ObjectStore(
        "epochal-no-such-bucket",
        endpoint_url=seaweedfs.endpoint_url,
        access_key=seaweedfs.access_key,
        secret_key=seaweedfs.secret_key,
    )
    with pytest.raises(StoreError, match="bucket epochal-no-such-bucket does not exist: create it or fix"):
        store.put("k", b"x")


def test_credentials_never_appear_in_uri_repr_or_errors(seaweedfs: SeaweedFSServer) -> None:
    store = seaweedfs.make_store(BUCKET, _prefix())
    wrong = S3ObjectStore(
        BUCKET, endpoint_url=seaweedfs.endpoint_url, access_key=seaweedfs.access_key, secret_key="W" * 40
    )
    missing = S3ObjectStore(
        "epochal-no-such-bucket",
        endpoint_url=seaweedfs.endpoint_url,
        access_key=seaweedfs.access_key,
        secret_key=seaweedfs.secret_key,
    )
    nowhere = S3ObjectStore(
        BUCKET,
        endpoint_url="http://127.0.0.1:9",
        access_key=seaweedfs.access_key,
        secret_key=seaweedfs.secret_key,
        max_attempts=1,
    )
    texts = [store.uri, repr(store), seaweedfs.uri(BUCKET, "p"), repr(seaweedfs)]
    for failing in (wrong, missing, nowhere):
        with pytest.raises(StoreError) as caught:
            failing.get("job/LATEST")
        texts.append(str(caught.value))
    for text in texts:
        assert seaweedfs.access_key not in text and seaweedfs.secret_key not in text, text
    assert "check the credentials" in texts[4]


# -- outages ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def own_seaweedfs() -> Iterator[SeaweedFSServer]:
    """A server of our own to stop, pause and restart without disturbing the session one."""
    server = SeaweedFSServer().start()
    try:
        yield server
    finally:
        server.stop(grace_s=1)


def _fast_failing_store(server: SeaweedFSServer, prefix: str) -> S3ObjectStore:
    return server.make_store(BUCKET, prefix, max_attempts=2, connect_timeout=1, read_timeout=1)


def test_paused_server_gives_transient_error_within_bounded_time(own_seaweedfs: SeaweedFSServer) -> None:
    store = _fast_failing_store(own_seaweedfs, _prefix())
    store.put("job/LATEST", b"1")
    own_seaweedfs.pause()
    try:
        started = time.monotonic()
        with pytest.raises(TransientStoreError, match=r"job/LATEST.*ReadTimeoutError"):
            store.get("job/LATEST")
        assert time.monotonic() - started < 10
    finally:
        own_seaweedfs.resume()
    assert store.get("job/LATEST").data == b"1"


def test_stopped_server_gives_transient_error_and_start_or_restart_keeps_the_data(
    own_seaweedfs: SeaweedFSServer,
) -> None:
    store = _fast_failing_store(own_seaweedfs, _prefix())
    v1 = store.put_if_absent("job/_job.json", b"spec")
    own_seaweedfs.stop(keep_data=True, grace_s=2)

    started = time.monotonic()
    with pytest.raises(TransientStoreError, match=r"put_if_match of 'job/_job.json' in s3://") as caught:
        store.put_if_match("job/_job.json", b"spec-2", v1)
    assert time.monotonic() - started < 10
    assert "\n" not in str(caught.value)

    own_seaweedfs.start()
    assert store.get("job/_job.json").data == b"spec"  # same store object, same endpoint
    v2 = store.put_if_match("job/_job.json", b"spec-2", v1)

    own_seaweedfs.restart(grace_s=1)
    assert store.get("job/_job.json").version == v2
