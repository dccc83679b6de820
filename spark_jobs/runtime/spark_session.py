"""A SparkSession for the embedded default (``local[*]``) and for tests (``local[2]``).

Spark's Python workers must run this interpreter (``PYSPARK_PYTHON = sys.executable``), or they
fail with "No module named 'pyarrow'"; the web UI stays off and everything binds to loopback
(``spark_jobs.sources.spark_table_session``, which also owns :func:`driver_spark`: the session of
DataFrame stages and Spark-native sources, the active one or a ``local[1]`` one per process).
"""

from __future__ import annotations

from typing import Any

from spark_jobs.sources.spark_table_session import LOCAL_MASTER, build_session, driver_spark


def get_spark(master: str = "local[*]", app_name: str = "epochal", conf: dict[str, str] | None = None) -> Any:
    return build_session(master, app_name, conf)


__all__ = ["LOCAL_MASTER", "driver_spark", "get_spark"]
