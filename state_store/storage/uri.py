"""Open an ObjectStore from a URI.

* ``memory://<name>`` -- a process-wide in-memory store (tests, demos).
* ``file:///abs/path`` -- :class:`LocalObjectStore` rooted at the path (created if missing).
* ``s3://bucket[/prefix][?endpoint_url=...&region=...]`` -- :class:`S3ObjectStore`; credentials come
  from the standard boto3 chain (environment, profile, instance role), never from the URI.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qs, unquote, urlsplit

from state_store.core.errors import BadInputError
from state_store.core.ports import ObjectStore

_S3_OPTIONS = {"endpoint_url", "region"}


class InvalidStoreURI(ValueError, BadInputError):
    """A storage URI that cannot be opened; the message says what to write instead."""


_EXAMPLES = "use memory://name, file:///abs/path or s3://bucket/prefix?endpoint_url=http://host:port"


def open_store(
    uri: str, *, must_exist: bool = False, credentials: tuple[str, str] | None = None
) -> ObjectStore:
    """Return the ObjectStore named by ``uri`` or raise InvalidStoreURI with a one-line remedy.

    ``must_exist``: a local folder that does not exist is an error instead of a new, empty store
    (read-only commands: a mistyped path is reported, nothing is created). ``credentials``: an S3
    access key id and secret (an Airflow connection's), instead of the boto3 chain."""
    parts = urlsplit(uri)
    if _USERINFO.search(uri) and parts.scheme != "s3":
        raise InvalidStoreURI(f"storage URI {redact(uri)!r} must not carry credentials: {_NO_SECRETS}")
    if parts.scheme == "memory":
        from state_store.storage.memory import MemoryObjectStore

        return MemoryObjectStore.named(parts.netloc + parts.path)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise InvalidStoreURI(
                f"storage URI {uri!r} is invalid: file URIs need an absolute path; {_EXAMPLES}"
            )
        from state_store.storage.local import LocalObjectStore

        path = unquote(parts.path)
        if must_exist and not os.path.isdir(path):
            what = "is a file, not a folder" if os.path.exists(path) else "does not exist"
            raise InvalidStoreURI(f"storage URI {uri!r}: {path} {what}: check --store")
        return LocalObjectStore(path)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise InvalidStoreURI(f"storage URI {redact(uri)!r} is invalid: no bucket; {_EXAMPLES}")
        if "@" in parts.netloc:
            raise InvalidStoreURI(
                f"storage URI for bucket {parts.hostname!r} must not carry credentials: {_NO_SECRETS}"
            )
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - _S3_OPTIONS)
        if unknown:
            raise InvalidStoreURI(
                f"storage URI {redact(uri)!r} has unknown option(s) {', '.join(unknown)}: allowed are "
                f"{', '.join(sorted(_S3_OPTIONS))} (credentials never go into a URI: {_NO_SECRETS})"
            )
        endpoint = _one(query, "endpoint_url", uri)
        region = _one(query, "region", uri)
        if endpoint is not None:
            _check_endpoint(endpoint, uri)
        if region is not None and not _REGION.match(region):
            raise InvalidStoreURI(
                f"storage URI {redact(uri)!r} has region={region!r}: use an AWS region name like "
                "us-east-1, or leave region out"
            )
        from state_store.storage.s3 import S3ObjectStore

        access_key, secret_key = credentials or (None, None)
        return S3ObjectStore(
            parts.netloc,
            parts.path.strip("/"),
            endpoint_url=endpoint,
            region=region,
            access_key=access_key,
            secret_key=secret_key,
        )
    raise InvalidStoreURI(f"storage URI {redact(uri)!r} has unsupported scheme {parts.scheme!r}: {_EXAMPLES}")


_NO_SECRETS = "use the AWS environment variables, a profile or an Airflow connection"
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$|^[a-z0-9][a-z0-9-]{1,62}$")


def _one(query: dict[str, list[str]], name: str, uri: str) -> str | None:
    values = query.get(name)
    if values is None:
        return None
    if len(values) != 1 or not values[0]:
        raise InvalidStoreURI(
            f"storage URI {redact(uri)!r} gives {name} {'twice' if len(values) > 1 else 'without a value'}: "
            f"give it once with a value, or leave it out"
        )
    return values[0]


def _check_endpoint(endpoint: str, uri: str) -> None:
    parts = urlsplit(endpoint)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise InvalidStoreURI(
            f"the endpoint_url of storage URI for bucket {urlsplit(uri).hostname!r} carries credentials: "
            f"{_NO_SECRETS}"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise InvalidStoreURI(
            f"endpoint_url {redact(endpoint)!r} is invalid: use http(s)://host:port without a path query"
        )


_SECRET_VALUE = re.compile(
    r"(?i)((?:aws_)?(?:secret(?:_access)?_key|access_key(?:_id)?|session_token|token|password|passwd|"
    r"secret|signature|credential|sig)=)([^&\s'\"]+)"
)
_USERINFO = re.compile(r"(://)[^/@\s'\"]+@")


def redact(text: str) -> str:
    """``text`` with every credential-shaped value replaced by ``***``: the userinfo of any URL
    (``scheme://user:password@host``) and the value of any ``key=value`` whose key names a secret
    (``aws_secret_access_key=``, ``token=``, ``password=``, ...)."""
    return _SECRET_VALUE.sub(r"\1***", _USERINFO.sub(r"\1***@", text))
