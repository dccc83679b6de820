"""Fixtures shared by integration tests: one real SeaweedFS S3 server per session, on 127.0.0.1."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from state_store.storage.s3 import S3ObjectStore
from state_store.testing.seaweedfs import SeaweedFSServer


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[SeaweedFSServer]:
    server = SeaweedFSServer().start()
    try:
        yield server
    finally:
        server.stop(grace_s=1)  # the data is thrown away: no need to wait for a graceful exit


@pytest.fixture
def s3_store(seaweedfs: SeaweedFSServer) -> S3ObjectStore:
    """An empty store: a fresh prefix in the shared test bucket."""
    return seaweedfs.make_store("epochal-test", f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def spark(seaweedfs: SeaweedFSServer) -> Iterator[object]:
    """A local[2] SparkSession whose Python workers can reach the SeaweedFS S3 server: credentials
    go through the standard AWS environment variables, in this process and as the session's
    ``spark.executorEnv`` (the JVM may have started earlier in this process, for another test's
    ``driver_spark`` session, which is stopped first so that this one is really new)."""
    import os

    from pyspark.sql import SparkSession

    from spark_jobs.runtime.spark_session import get_spark

    credentials = {
        "AWS_ACCESS_KEY_ID": seaweedfs.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweedfs.secret_key,
        "AWS_DEFAULT_REGION": seaweedfs.region,
    }
    os.environ.update(credentials)
    earlier = SparkSession.getActiveSession()
    if earlier is not None:
        earlier.stop()
    session = get_spark(
        "local[2]", "epochal-tests", {f"spark.executorEnv.{k}": v for k, v in credentials.items()}
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
