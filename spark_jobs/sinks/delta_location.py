"""Where a Delta sink's table lives: a local folder or ``s3://bucket/prefix``, and the storage rules.

One :class:`DeltaLocation` names the table for delta-rs (``uri`` + ``storage_options``) and for the
staged files (a pyarrow filesystem over delta-rs's own object store, so both use one configuration).

Commit safety (what the Delta log needs from the storage, as delta-rs's log store states it): a
commit is one create-only write of ``_delta_log/<version>.json``; of two writers racing for a version
exactly one wins. On local disk delta-rs links without replacing; on S3, delta-rs 1.x writes the
entry with ``If-None-Match: *`` (lock-free, no DynamoDB). A store that ignores that header would let
a second commit overwrite the first silently, so before the first commit of a process to an S3 table
:meth:`DeltaLocation.check_commit_safety` probes it (two create-only puts of one key: the second must
be refused) and raises :class:`DeltaStorageError` naming the remedy if not. Setting
``AWS_S3_ALLOW_UNSAFE_RENAME=true`` skips the probe: then one committer at a time is the user's
promise (Epochal's job lease gives that for one job, not for other writers of the table).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from state_store.core.errors import BadInputError, EpochalError
from state_store.core.ports import ObjectAlreadyExists, StoreError

log = logging.getLogger(__name__)

UNSAFE_RENAME = "AWS_S3_ALLOW_UNSAFE_RENAME"
_SCHEMES = ("", "file", "s3", "s3a")
_PROBED: set[tuple[str, str]] = set()
_PROBE_LOCK = threading.Lock()


class TableFiles:
    """Files of one table folder, by path relative to it: ``put`` whole objects, ``fs`` to read,
    list and delete (a pyarrow filesystem). Both go through delta-rs's object store, so staged files
    use exactly the storage configuration the commits use."""

    def __init__(self, uri: str, options: dict[str, str] | None) -> None:
        from deltalake._internal import DeltaFileSystemHandler
        from deltalake.fs import DeltaStorageHandler

        self._raw = DeltaFileSystemHandler(uri, options)  # writes bytes (the pyarrow wrapper cannot)
        self.fs = pafs.PyFileSystem(DeltaStorageHandler(uri, options))

    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` as one object (on S3 a single PUT or multipart upload: whole or absent)."""
        stream = self._raw.open_output_stream(path)
        try:
            stream.write(data)
        finally:
            stream.close()  # type: ignore[attr-defined]  # present at run time, missing from the stub


class DeltaStorageError(EpochalError):
    """The table's storage cannot give the guarantee a Delta commit needs (see module docstring)."""


class InvalidDeltaLocation(ValueError, BadInputError):
    """A table location or storage option the sink cannot use."""


def _option(options: Mapping[str, str], *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


@dataclass(frozen=True, slots=True)
class DeltaLocation:
    """A Delta table's location: ``uri`` (absolute local path, or ``s3://bucket/prefix``) and the
    delta-rs ``storage_options`` (never printed: they may hold credentials)."""

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, table_uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaLocation:
        """Validate and normalize a user's ``table_uri`` (a folder path, ``file://...`` or
        ``s3://bucket/prefix``); a one-line :class:`InvalidDeltaLocation` otherwise."""
        options = dict(storage_options or {})
        bad = [k for k, v in options.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise InvalidDeltaLocation(
                f"Delta table {table_uri!r}: storage_options must map strings to strings; fix the "
                f"value(s) of {bad} (e.g. 'true' instead of True)"
            )
        if not isinstance(table_uri, str) or not table_uri.strip():
            raise InvalidDeltaLocation(
                "DeltaSink table_uri is empty: give a folder path or an s3://bucket/prefix URI"
            )
        parts = urlsplit(table_uri)
        scheme = parts.scheme.lower() if len(parts.scheme) > 1 else ""  # "C:" is a drive, not a scheme
        if scheme not in _SCHEMES:
            raise InvalidDeltaLocation(
                f"Delta table {table_uri!r}: scheme {parts.scheme!r} is not supported by the Delta "
                "sink: use a local folder path, file://..., or s3://bucket/prefix"
            )
        if scheme in ("s3", "s3a"):
            if not parts.netloc:
                raise InvalidDeltaLocation(
                    f"Delta table {table_uri!r} names no bucket: write s3://bucket/prefix"
                )
            prefix = parts.path.strip("/")
            return cls(f"s3://{parts.netloc}/{prefix}".rstrip("/"), options)
        path = parts.path if scheme == "file" else table_uri
        return cls(os.path.abspath(os.path.expanduser(path)), options)

    @property
    def is_s3(self) -> bool:
        return self.uri.startswith("s3://")

    @property
    def options(self) -> dict[str, str]:
        """The storage options as delta-rs takes them (a fresh dict per call)."""
        return dict(self.storage_options)

    def files(self) -> TableFiles:
        """The table folder's files, over delta-rs's object store with the same options (a local
        folder is created if missing)."""
        if not self.is_s3:
            os.makedirs(self.uri, exist_ok=True)
        return TableFiles(self.uri, self.options or None)

    def check_commit_safety(self) -> None:
        """Raise :class:`DeltaStorageError` if this S3 endpoint would let two commits of one
        version both succeed (module docstring). Probed once per endpoint and bucket per process;
        local folders need no probe."""
        if not self.is_s3:
            return
        if (_option(self.storage_options, UNSAFE_RENAME) or "").lower() == "true":
            log.warning(
                "Delta table %s: %s=true, commits are not protected against a concurrent writer",
                self.uri,
                UNSAFE_RENAME,
            )
            return
        endpoint = _option(
            self.storage_options, "AWS_ENDPOINT_URL", "aws_endpoint", "endpoint", "AWS_ENDPOINT"
        )
        bucket, _, prefix = self.uri[len("s3://") :].partition("/")
        key = (endpoint or "aws", bucket)
        with _PROBE_LOCK:
            if key in _PROBED:
                return
            self._probe(bucket, prefix, endpoint)
            _PROBED.add(key)

    def _probe(self, bucket: str, prefix: str, endpoint: str | None) -> None:
        from state_store.storage.s3 import S3ObjectStore

        access = _option(self.storage_options, "AWS_ACCESS_KEY_ID", "aws_access_key_id", "access_key_id")
        secret = _option(
            self.storage_options, "AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "secret_access_key"
        )
        region = _option(self.storage_options, "AWS_REGION", "aws_region", "region", "AWS_DEFAULT_REGION")
        store = S3ObjectStore(
            bucket, prefix, endpoint_url=endpoint, region=region, access_key=access, secret_key=secret
        )
        probe = f"_epochal/conditional-put-probe-{uuid.uuid4().hex}"
        remedy = (
            "use a store that honours conditional writes (AWS S3, MinIO, Cloudflare R2, SeaweedFS), "
            f"or, with a single writer only, set storage option {UNSAFE_RENAME}=true"
        )
        try:
            store.put_if_absent(probe, b"first")
            try:
                store.put_if_absent(probe, b"second")
            except ObjectAlreadyExists:
                return
            raise DeltaStorageError(
                f"Delta table {self.uri}: the S3 endpoint {endpoint or 'AWS'} ignores If-None-Match, "
                f"so two Delta commits of one version could both succeed and one be lost: {remedy}"
            )
        except StoreError as exc:
            if isinstance(exc, DeltaStorageError):
                raise
            raise DeltaStorageError(
                f"Delta table {self.uri}: the S3 endpoint {endpoint or 'AWS'} refused a conditional "
                f"write ({exc}); Delta commits need it: {remedy}"
            ) from exc
        finally:
            try:
                store.delete(probe)
            except StoreError:
                log.warning("Delta table %s: probe object %s not deleted", self.uri, probe)
