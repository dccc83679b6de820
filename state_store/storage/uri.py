"""Open an ObjectStore from a URI.

* ``memory://<name>`` -- a process-wide in-memory store (tests, demos).
* ``file:///abs/path`` -- :class:`LocalObjectStore` rooted at the path (created if missing).
* ``s3://bucket[/prefix][?endpoint_url=...&region=...]`` -- :class:`S3ObjectStore`; credentials come
  from the standard boto3 chain (environment, profile, instance role), never from the URI.
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from state_store.core.ports import ObjectStore

_S3_OPTIONS = {"endpoint_url", "region"}


class InvalidStoreURI(ValueError):
    """A storage URI that cannot be opened; the message says what to write instead."""


_EXAMPLES = "use memory://name, file:///abs/path or s3://bucket/prefix?endpoint_url=http://host:port"


def open_store(uri: str) -> ObjectStore:
    """Return the ObjectStore named by ``uri`` or raise InvalidStoreURI with a one-line remedy."""
    parts = urlsplit(uri)
    if parts.scheme == "memory":
        from state_store.storage.memory import MemoryObjectStore

        return MemoryObjectStore.named(parts.netloc + parts.path)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise InvalidStoreURI(
                f"storage URI {uri!r} is invalid: file URIs need an absolute path; {_EXAMPLES}"
            )
        from state_store.storage.local import LocalObjectStore

        return LocalObjectStore(unquote(parts.path))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise InvalidStoreURI(f"storage URI {uri!r} is invalid: no bucket; {_EXAMPLES}")
        if "@" in parts.netloc:
            raise InvalidStoreURI(
                f"storage URI for bucket {parts.hostname!r} must not carry credentials: use the "
                "AWS environment variables, a profile or an Airflow connection"
            )
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - _S3_OPTIONS)
        if unknown:
            raise InvalidStoreURI(
                f"storage URI {uri!r} has unknown option(s) {', '.join(unknown)}: "
                f"allowed are {', '.join(sorted(_S3_OPTIONS))}"
            )
        from state_store.storage.s3 import S3ObjectStore

        return S3ObjectStore(
            parts.netloc,
            parts.path.strip("/"),
            endpoint_url=query.get("endpoint_url", [None])[0],
            region=query.get("region", [None])[0],
        )
    raise InvalidStoreURI(f"storage URI {uri!r} has unsupported scheme {parts.scheme!r}: {_EXAMPLES}")
