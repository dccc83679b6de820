"""The S3 store's timestamp parser gives botocore's instants, without dateutil on the hot forms."""

from __future__ import annotations

import pytest
from botocore.utils import parse_timestamp

from state_store.storage.s3 import S3ObjectStore, fast_timestamp

FORMS = [
    "2026-11-22T12:00:00.123Z",  # ListObjectsV2 LastModified
    "2026-11-22T12:00:00Z",
    "2026-11-22T12:00:00.5+02:00",
    "Sun, 22 Nov 2026 12:00:00 GMT",  # Last-Modified header of HEAD/GET
    "1795435200",  # epoch seconds (botocore's fallback handles it)
    "1795435200.25",
]


@pytest.mark.parametrize("value", FORMS)
def test_the_same_instant_as_botocore(value: str) -> None:
    ours, theirs = fast_timestamp(value), parse_timestamp(value)
    assert ours.tzinfo is not None
    assert ours.timestamp() == theirs.timestamp()


def test_a_value_nobody_can_parse_fails_as_in_botocore() -> None:
    with pytest.raises(ValueError):
        parse_timestamp("not a time")
    with pytest.raises(ValueError):
        fast_timestamp("not a time")


def test_the_store_s_own_client_uses_it() -> None:
    store = S3ObjectStore("bucket-a", endpoint_url="http://127.0.0.1:9", access_key="a", secret_key="b")
    factory = store._client._endpoint._response_parser_factory  # type: ignore[attr-defined]
    assert factory._defaults["timestamp_parser"] is fast_timestamp
