"""A SparkSession for the embedded default (``local[*]``) and for tests (``local[2]``).

Spark's Python workers must run this interpreter (``PYSPARK_PYTHON = sys.executable``), or they
fail with "No module named 'pyarrow'"; the web UI stays off and everything binds to loopback.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def get_spark(master: str = "local[*]", app_name: str = "epochal", conf: dict[str, str] | None = None) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
