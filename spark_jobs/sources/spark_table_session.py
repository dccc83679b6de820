"""The driver's SparkSession for Spark-native sources and DataFrame stages, and the settings every
Epochal SparkSession uses (``spark_jobs.runtime.spark_session.get_spark`` builds on them).

:func:`driver_spark` is the active session when there is one (``--executor spark``, a notebook,
a test's session), else one ``local[1]`` session created once per process and reused
(``--executor local``, an Airflow trigger task), with the session time zone UTC so timestamps
convert to and from Arrow without a local offset.

Spark's Python workers must run this interpreter (``PYSPARK_PYTHON = sys.executable``), or they
fail with "No module named 'pyarrow'"; the web UI stays off and everything binds to loopback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, Final

LOOPBACK_CONF: Final[Mapping[str, str]] = {
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
}
"""Settings of every session Epochal creates (a local session must not listen beyond loopback)."""

LOCAL_MASTER: Final[str] = "local[1]"
"""The master of the session the driver creates when no session is active."""


def build_session(master: str, app_name: str, conf: Mapping[str, str] | None = None) -> Any:
    """``SparkSession.builder.getOrCreate()`` with :data:`LOOPBACK_CONF` and ``conf``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**LOOPBACK_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def driver_spark() -> Any:
    """The active SparkSession, else a ``local[1]`` one created once per process (module docstring)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    return build_session(LOCAL_MASTER, "epochal-local", {"spark.sql.session.timeZone": "UTC"})
