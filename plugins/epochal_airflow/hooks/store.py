"""EpochalStoreHook: storage for a job from a URI, optionally with an Airflow ``aws`` connection.

``store_uri`` names the place (``file:///...``, ``s3://bucket/prefix``); ``conn_id`` (an Amazon
provider ``aws`` connection: login = access key id, password = secret key, extras ``endpoint_url``
and ``region_name``) supplies credentials and endpoint for ``s3://`` URIs. Credentials never enter
the URI, the logs or XComs; subtasks in this process get them through the standard AWS environment
variables, which :meth:`EpochalStoreHook.export_credentials` sets (and only in this process).

:meth:`EpochalStoreHook.runtime` gives an operator everything one task needs in one call: the job,
its store, the epoch's clock and the kill switch (this is where the Airflow entry point reads
``EPOCHAL_FAULT``; nothing below it reads the environment).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from airflow.sdk import BaseHook

from state_store.clocks import ManualClock, SystemClock
from state_store.core.ports import KillSwitch, ObjectStore
from state_store.faults import kill_switch_from_env
from state_store.storage import open_store

if TYPE_CHECKING:
    from airflow.sdk import Context

    from spark_jobs.api.job import Job


def run_clock(context: Context) -> ManualClock:
    """The epoch's clock: the run's data-interval end (or logical date), in ms; it does not move."""
    end = context.get("data_interval_end") or context.get("logical_date")
    return ManualClock(SystemClock().now_ms() if end is None else int(end.timestamp() * 1000))


@dataclass(frozen=True)
class EpochalRuntime:
    """What one task of a job needs. ``store_uri`` is the resolved URI (endpoint and region, never
    credentials) that Spark tasks reopen; ``token`` is the fencing token of the job's lease once the
    task holds it (``None`` before, and for the few steps that run without it)."""

    job: Job
    store: ObjectStore
    store_uri: str
    clock: ManualClock
    kill: KillSwitch
    token: int | None = None

    def with_token(self, token: int | None) -> EpochalRuntime:
        return replace(self, token=token)


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
        """Put the connection's keys into this process's AWS environment, for the subtasks that run
        in this process and reopen the store from its URI. Called once per task, by :meth:`runtime`."""
        os.environ.update(self.credential_env())

    def get_store(self) -> ObjectStore:
        """The store, with the connection's keys given to its client (the environment is untouched)."""
        env = self.credential_env()
        keys = (
            (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) if "AWS_ACCESS_KEY_ID" in env else None
        )
        return open_store(self.resolved_uri(), credentials=keys)

    def runtime(
        self, context: Context, job_ref: str, job_options: Mapping[str, Any] | None = None
    ) -> EpochalRuntime:
        """The job, its store, the run's clock and the kill switch for one task of ``context``'s run."""
        from spark_jobs.jobs.loading import load_job

        job = load_job(job_ref, **dict(job_options or {}))
        self.export_credentials()
        return EpochalRuntime(
            job, self.get_store(), self.resolved_uri(), run_clock(context), kill_switch_from_env(os.environ)
        )

    def get_conn(self) -> ObjectStore:
        return self.get_store()
