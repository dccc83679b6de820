"""EpochalStoreHook: storage for a job from a URI, optionally with an Airflow ``aws`` connection.

``store_uri`` names the place (``file:///...``, ``s3://bucket/prefix``); ``conn_id`` (an Amazon
provider ``aws`` connection: login = access key id, password = secret key, extras ``endpoint_url``
and ``region_name``) supplies credentials and endpoint for ``s3://`` URIs. Credentials never enter
the URI, the logs or XComs; subtasks in this process get them through the standard AWS environment
variables, which :meth:`EpochalStoreHook.export_credentials` sets (and only in this process).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlencode, urlsplit

from airflow.sdk import BaseHook

from state_store.core.ports import ObjectStore
from state_store.storage import open_store


class EpochalStoreHook(BaseHook):
    conn_name_attr = "conn_id"
    default_conn_name = "aws_default"
    conn_type = "aws"
    hook_name = "Epochal store"

    def __init__(self, store_uri: str, conn_id: str | None = None) -> None:
        super().__init__()
        self.store_uri = store_uri
        self.conn_id = conn_id

    def _connection(self) -> Any:
        return self.get_connection(self.conn_id) if self.conn_id else None

    def resolved_uri(self) -> str:
        """The store URI with the connection's endpoint and region (never its credentials)."""
        conn = self._connection()
        parts = urlsplit(self.store_uri)
        if conn is None or parts.scheme != "s3":
            return self.store_uri
        extra = conn.extra_dejson
        query = {
            k: v
            for k, v in (("endpoint_url", extra.get("endpoint_url")), ("region", extra.get("region_name")))
            if v
        }
        if not query or parts.query:
            return self.store_uri
        return f"{self.store_uri}?{urlencode(query)}"

    def credential_env(self) -> dict[str, str]:
        """The connection's keys and region as standard AWS environment variables ({} without an
        ``s3://`` store or connection). For a child process's environment only: never log it."""
        conn = self._connection()
        if conn is None or urlsplit(self.store_uri).scheme != "s3":
            return {}
        env: dict[str, str] = {}
        if conn.login and conn.password:
            env["AWS_ACCESS_KEY_ID"] = conn.login
            env["AWS_SECRET_ACCESS_KEY"] = conn.password
        region = conn.extra_dejson.get("region_name")
        if region:
            env["AWS_DEFAULT_REGION"] = region
        return env

    def export_credentials(self) -> None:
        """Put the connection's keys into this process's AWS environment (for in-process subtasks)."""
        os.environ.update(self.credential_env())

    def get_store(self) -> ObjectStore:
        self.export_credentials()
        return open_store(self.resolved_uri())

    def get_conn(self) -> ObjectStore:
        return self.get_store()
