"""ObjectStore on S3 (AWS or any S3-compatible server such as SeaweedFS), through boto3.

How each guarantee of the port is met:

* atomic visibility -- a single ``PutObject`` is atomic on S3: readers see the old or the new
  object, never a part of one.
* create-only -- ``PutObject`` with ``If-None-Match: *``; the server picks one winner, the others
  get 412 PreconditionFailed -> :class:`ObjectAlreadyExists`.
* compare-and-swap -- ``PutObject`` with ``If-Match: "<etag>"``; a stale ETag or a missing key
  gives 412 (or 404) -> :class:`VersionMismatch`.
* 409 ConditionalRequestConflict (a concurrent conditional write in flight) is retried up to
  ``_CONFLICT_RETRIES`` times, then reported like a 412.
* lost responses -- botocore retries a write whose response was lost (timeout, reset, 5xx), and the
  retry then meets its own first attempt and fails the precondition. So after a 412 the adapter
  reads the key: if it holds exactly our bytes the call succeeds with that version. Consequence:
  two writers of *identical* bytes may both "win"; give every writer distinct content (for example
  its attempt id) wherever mutual exclusion matters.
* verified uploads (``put_verified``, for data files: ``state_store.core.checksums.put_checked``) --
  the bytes are first checked against the writer's checksum (BLAKE3; a mismatch is refused before
  anything is sent), then sent with an S3 additional checksum, ``ChecksumAlgorithm="CRC32"``:
  botocore computes the CRC32 of the body it sends and the server recomputes it and refuses the
  upload (``BadDigest``, nothing stored) if the bytes changed in transit -> ChecksumMismatchError.
  S3 cannot check BLAKE3 itself, so the two checks together cover writer -> server. SeaweedFS 4.48
  (the test server) verifies CRC32, CRC32C and SHA256 additional checksums and Content-MD5 (tested);
  CRC32 is the one botocore computes without the optional ``awscrt`` package (CRC32C needs it).
* versions are the ETag without its quotes; put_if_match puts the quotes back, so a version read
  from get/head/list/put is accepted as is. On SeaweedFS (and plain AWS uploads) the ETag is the
  MD5 of the content: writing identical bytes again gives the same version.
* listing -- ``ListObjectsV2`` pages are collected and sorted before yielding, because SeaweedFS
  (and S3 Express directory buckets) do not return S3's binary key order: SeaweedFS lists a folder's
  contents right after the folder name, so ``a/x`` comes before ``a-b``. Keys ending in '/'
  (folder markers made by other tools) are skipped.
* transient failures -- botocore's ``standard`` retry mode (bounded exponential backoff with
  jitter on throttling, 5xx, timeouts and connection errors) with ``max_attempts`` attempts in
  total; whatever is left becomes :class:`TransientStoreError` with a one-line message. Every wait
  is bounded: a connect and a read timeout per attempt, so an unresponsive server (a paused
  process accepts connections and never answers) fails a request within
  ``max_attempts * (connect_timeout + read_timeout)`` plus the backoff -- about a minute by default
  (``request_deadline_s``), never a hang.
* credentials -- explicit ``access_key``/``secret_key`` or the standard boto3 chain (environment,
  profile, instance role). They never appear in :attr:`S3ObjectStore.uri`, ``repr``, logs or
  error messages.

Keys are ``<prefix>/<key>`` in the bucket (just ``<key>`` without a prefix). ``head`` cannot tell a
missing key from a missing bucket (S3 answers both with a bare 404) and returns None for both; the
other operations report a missing bucket as a :class:`StoreError` that says what to do.

SeaweedFS quirk: a create-only put of ``a/b`` is refused (412) while any key ``a/b/...`` exists,
because ``a/b`` is then a folder; the adapter reports that as a :class:`StoreError` naming the cause
rather than as ObjectAlreadyExists. The layout of DESIGN.md never uses a key as a folder of others.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Iterator
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.utils import parse_timestamp

from state_store.core import checksums
from state_store.core.ports import (
    ChecksumMismatchError,
    ObjectAlreadyExists,
    ObjectData,
    ObjectInfo,
    ObjectNotFound,
    StoreError,
    TransientStoreError,
    VersionMismatch,
    validate_key,
    validate_prefix,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_log = logging.getLogger(__name__)

_CONFLICT_RETRIES = 3
_CONFLICT_CODES = frozenset({"ConditionalRequestConflict", "OperationAborted"})
_TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "RequestThrottled",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "SlowDown",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "InternalError",
        "ServiceUnavailable",
    }
)
_AUTH_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
)
_TRANSIENT_BOTO = (ConnectionError, HTTPClientError, IncompleteReadError)
_DIGEST_CODES = frozenset(
    {"BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch"}
)
SENT_CHECKSUM = "CRC32"
"""The S3 additional checksum of verified uploads (module docstring)."""


def _sent_checksum(verified: bool) -> dict[str, Any]:
    return {"ChecksumAlgorithm": SENT_CHECKSUM} if verified else {}


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _version(etag: str) -> str:
    return etag.strip('"')


def _ms(modified: datetime) -> int:
    return int(modified.timestamp() * 1000)


def fast_timestamp(value: str) -> datetime:
    """botocore's timestamp parser, without dateutil for the two forms S3 sends.

    ``ListObjectsV2`` carries an ISO-8601 ``LastModified`` per key, and botocore parses each with
    dateutil: 2.7 of 5.0 s of completing a 1,024-ack checkpoint went there (cProfile). ISO-8601
    goes to ``datetime.fromisoformat`` and HTTP dates to ``email.utils``; anything else, and any
    value those refuse, to botocore's own parser. All three return timezone-aware datetimes of
    the same instant. Installed with ``set_parser_defaults``, the hook the AWS CLI uses for this.
    """
    try:
        return datetime.fromisoformat(value) if value[:1].isdigit() else parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return parse_timestamp(value)


class S3ObjectStore:
    """Objects under ``s3://bucket/prefix``; thread-safe (one boto3 client, shared)."""

    #: Reads may run concurrently (one thread-safe boto3 client, 32 pooled connections);
    #: see ``state_store.core.parallel``.
    max_concurrent_reads = 32
    #: Concurrent writes (snapshot uploads; boto3 clients are thread-safe).
    max_concurrent_writes = 16

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        max_attempts: int = 4,
        connect_timeout: float = 3,
        read_timeout: float = 12,
        client: S3Client | None = None,
    ) -> None:
        """``max_attempts`` counts every attempt of one request, the first included.

        ``client`` replaces the boto3 client built from the other arguments (its own retry and
        timeout settings then apply); ``endpoint_url`` and ``region`` still name the store in ``uri``.
        """
        if not _BUCKET.match(bucket):
            raise ValueError(
                f"S3 bucket name {bucket!r} is invalid: use 3-63 characters of a-z, 0-9, '.' and '-'"
            )
        prefix = prefix.strip("/")
        if prefix:
            validate_key(prefix)
        if (access_key is None) != (secret_key is None):
            raise ValueError("give both access_key and secret_key, or neither (to use the boto3 chain)")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self._bucket = bucket
        self._prefix = prefix
        self._base = f"{prefix}/" if prefix else ""
        self._endpoint_url = endpoint_url
        self._region = region
        self._max_attempts = max_attempts
        #: The longest one request can take before it fails (retries and backoff included).
        self.request_deadline_s = max_attempts * (connect_timeout + read_timeout) + sum(
            min(2.0**i, 20.0)
            for i in range(max_attempts - 1)  # botocore's standard backoff caps
        )
        self._secrets = tuple(s for s in (access_key, secret_key) if s)
        if client is None:
            config = Config(
                region_name=region,
                retries={"mode": "standard", "total_max_attempts": max_attempts},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_pool_connections=32,
                s3={"addressing_style": "path"} if endpoint_url else None,
            )
            botocore_session = botocore.session.Session()
            botocore_session.get_component("response_parser_factory").set_parser_defaults(
                timestamp_parser=fast_timestamp
            )
            client = boto3.session.Session(botocore_session=botocore_session).client(
                "s3",
                endpoint_url=endpoint_url,
                aws_access_key_id=access_key,
                aws_secret_access_key=secret_key,
                config=config,
            )
        self._client: S3Client = client

    # -- identity ----------------------------------------------------------------------------
    @property
    def uri(self) -> str:
        """``s3://bucket[/prefix][?endpoint_url=...&region=...]`` -- never carries credentials."""
        query = {k: v for k, v in (("endpoint_url", self._endpoint_url), ("region", self._region)) if v}
        base = f"s3://{self._bucket}/{self._prefix}".rstrip("/")
        return f"{base}?{urlencode(query, safe=':/')}" if query else base

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        return self._prefix

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.uri!r})"

    def create_bucket_if_missing(self) -> bool:
        """Create the bucket unless it exists; return True if it was created (tests and demos)."""
        try:
            self._client.head_bucket(Bucket=self._bucket)
            return False
        except ClientError as exc:
            if _status(exc) != 404 and _code(exc) not in ("NoSuchBucket", "NotFound", "404"):
                raise self._fail(exc, "create_bucket", "") from exc
        except BotoCoreError as exc:
            raise self._fail(exc, "create_bucket", "") from exc
        kwargs: dict[str, Any] = {"Bucket": self._bucket}
        if self._region and self._region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self._region}
        try:
            self._client.create_bucket(**kwargs)
        except ClientError as exc:
            if _code(exc) in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                return False
            raise self._fail(exc, "create_bucket", "") from exc
        except BotoCoreError as exc:
            raise self._fail(exc, "create_bucket", "") from exc
        return True

    # -- the port ----------------------------------------------------------------------------
    def get(self, key: str) -> ObjectData:
        full = self._full(key)
        try:
            resp = self._client.get_object(Bucket=self._bucket, Key=full)
            data = resp["Body"].read()
        except ClientError as exc:
            if _code(exc) == "NoSuchKey":
                raise ObjectNotFound(f"object {key!r} not found in {self.uri}") from None
            raise self._fail(exc, "get", key) from exc
        except BotoCoreError as exc:
            raise self._fail(exc, "get", key) from exc
        return ObjectData(key, data, _version(resp["ETag"]))

    def head(self, key: str) -> ObjectInfo | None:
        full = self._full(key)
        try:
            resp = self._client.head_object(Bucket=self._bucket, Key=full)
        except ClientError as exc:
            if _status(exc) == 404:
                return None
            raise self._fail(exc, "head", key) from exc
        except BotoCoreError as exc:
            raise self._fail(exc, "head", key) from exc
        return ObjectInfo(key, resp["ContentLength"], _version(resp["ETag"]), _ms(resp["LastModified"]))

    def put(self, key: str, data: bytes) -> str:
        return self._put(key, data, verified=False)

    def _put(self, key: str, data: bytes, *, verified: bool) -> str:
        full = self._full(key)
        try:
            resp = self._client.put_object(
                Bucket=self._bucket, Key=full, Body=data, **_sent_checksum(verified)
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(exc, "put", key) from exc
        return _version(resp["ETag"])

    def put_verified(self, key: str, data: bytes, checksum: str, *, create_only: bool = False) -> str:
        """``put`` (``create_only``: ``put_if_absent``) of a data file whose writer computed
        ``checksum``, verified on the way (module docstring); ChecksumMismatchError, nothing
        stored, on a mismatch."""
        self._full(key)  # an invalid key is refused before anything is hashed or sent
        actual = checksums.mismatch(checksum, data)
        if actual is not None:
            raise ChecksumMismatchError(
                f"upload of {key!r} to {self.uri} refused: its bytes have checksum {actual}, its writer "
                f"computed {checksum}; nothing was sent: retry"
            )
        return self._create(key, data, verified=True) if create_only else self._put(key, data, verified=True)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self._create(key, data, verified=False)

    def _create(self, key: str, data: bytes, *, verified: bool) -> str:
        version = self._conditional_put("put_if_absent", key, data, if_match=None, verified=verified)
        if version is not None:
            return version
        version = self._version_if_holds(key, data)
        if version is not None:
            _log.info("put_if_absent of %r in %s: key already holds our bytes (lost response)", key, self.uri)
            return version
        if self._is_folder(key):
            raise StoreError(
                f"create-only put of {key!r} in {self.uri} was refused although the key does not exist: "
                f"the server treats it as a folder of other keys ({key}/...); use keys that are not "
                "folders of other keys"
            )
        raise ObjectAlreadyExists(f"object {key!r} already exists in {self.uri}")

    def put_if_match(self, key: str, data: bytes, expected_version: str) -> str:
        version = self._conditional_put("put_if_match", key, data, if_match=expected_version)
        if version is not None:
            return version
        version = self._version_if_holds(key, data)
        if version is not None:
            _log.info("put_if_match of %r in %s: key already holds our bytes (lost response)", key, self.uri)
            return version
        raise VersionMismatch(
            f"object {key!r} in {self.uri} is missing or not at version {expected_version!r}"
        )

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        validate_prefix(prefix)
        return self._list(prefix)

    def delete(self, key: str) -> None:
        full = self._full(key)
        try:
            self._client.delete_object(Bucket=self._bucket, Key=full)
        except ClientError as exc:
            if _code(exc) != "NoSuchKey":
                raise self._fail(exc, "delete", key) from exc
        except BotoCoreError as exc:
            raise self._fail(exc, "delete", key) from exc

    # -- helpers -----------------------------------------------------------------------------
    def _full(self, key: str) -> str:
        return self._base + validate_key(key)

    def _conditional_put(
        self, op: str, key: str, data: bytes, *, if_match: str | None, verified: bool = False
    ) -> str | None:
        """Put with If-None-Match (``if_match`` None) or If-Match; return the new version, or None
        when the precondition failed (412, a missing key, or 409 conflicts beyond the retries)."""
        full = self._full(key)
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                if if_match is None:
                    resp = self._client.put_object(
                        Bucket=self._bucket, Key=full, Body=data, IfNoneMatch="*", **_sent_checksum(verified)
                    )
                else:
                    resp = self._client.put_object(
                        Bucket=self._bucket, Key=full, Body=data, IfMatch=f'"{_version(if_match)}"'
                    )
                return _version(resp["ETag"])
            except ClientError as exc:
                code = _code(exc)
                if code in _CONFLICT_CODES:
                    if attempt < _CONFLICT_RETRIES:
                        time.sleep(random.uniform(0, 0.05 * 2**attempt))
                        continue
                    return None
                if code == "NoSuchBucket" or code in _DIGEST_CODES:
                    raise self._fail(exc, op, key) from exc
                if code in ("PreconditionFailed", "NoSuchKey") or _status(exc) in (404, 412):
                    return None
                raise self._fail(exc, op, key) from exc
            except BotoCoreError as exc:
                raise self._fail(exc, op, key) from exc
        return None  # pragma: no cover - the loop always returns

    def _version_if_holds(self, key: str, data: bytes) -> str | None:
        """The key's version if it holds exactly ``data`` (the lost-response rule), else None."""
        try:
            current = self.get(key)
        except ObjectNotFound:
            return None
        return current.version if current.data == data else None

    def _is_folder(self, key: str) -> bool:
        try:
            resp = self._client.list_objects_v2(Bucket=self._bucket, Prefix=self._full(key) + "/", MaxKeys=1)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(exc, "list", key + "/") from exc
        return bool(resp.get("Contents"))

    def _list(self, prefix: str) -> Iterator[ObjectInfo]:
        start = len(self._base)
        found: list[ObjectInfo] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self._bucket, Prefix=self._base + prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    name = obj["Key"]
                    if name.endswith("/") or not name.startswith(self._base):
                        continue
                    found.append(
                        ObjectInfo(name[start:], obj["Size"], _version(obj["ETag"]), _ms(obj["LastModified"]))
                    )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(exc, "list", prefix) from exc
        found.sort(key=lambda info: info.key.encode())
        yield from found

    def _fail(self, exc: Exception, op: str, key: str) -> StoreError:
        """Translate what boto3 raised (after its own retries) into the port's error types."""
        what = f"S3 {op} of {key!r} in {self.uri}" if key else f"S3 {op} in {self.uri}"
        error: StoreError
        if isinstance(exc, ClientError):
            code, status = _code(exc), _status(exc)
            message = exc.response.get("Error", {}).get("Message", "")
            attempts = int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)) + 1
            if code == "NoSuchBucket":
                error = StoreError(
                    f"bucket {self._bucket} does not exist: create it or fix the URI {self.uri}"
                )
            elif code in _DIGEST_CODES:
                error = ChecksumMismatchError(
                    f"{what} was refused by the server ({code}: the bytes it received do not match "
                    f"their checksum, so they changed in transit); nothing was stored: retry"
                )
            elif code in _TRANSIENT_CODES or status == 429 or status >= 500:
                error = TransientStoreError(
                    f"{what} failed after {attempts} attempt(s): {code or status} {message}; retry later"
                )
            elif code in _AUTH_CODES or status == 403:
                error = StoreError(
                    f"{what} was refused ({code or status}): check the credentials (environment, profile "
                    "or connection) and the bucket policy"
                )
            else:
                error = StoreError(f"{what} failed: {code or status} {message}")
        elif isinstance(exc, _TRANSIENT_BOTO):
            error = TransientStoreError(
                f"{what} failed after up to {self._max_attempts} attempt(s): {type(exc).__name__}: {exc}"
            )
        elif isinstance(exc, NoCredentialsError | PartialCredentialsError):
            error = StoreError(
                f"{what}: no usable AWS credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                "a profile, or an Airflow connection"
            )
        else:
            error = StoreError(f"{what} failed: {type(exc).__name__}: {exc}")
        return type(error)(self._redact(str(error)))

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return " ".join(text.split())
