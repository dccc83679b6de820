"""The runtime tests' small clickstream job whose source can be told to pause inside executors:
with ``EPOCHAL_TEST_PAUSE_S=<s>`` in an executor's environment (``spark.executorEnv.*``), the first
read of each Python worker sleeps that long -- so a test can kill the Spark worker while the epoch
is in flight. Without the variable it is exactly ``small_job()`` (same ids, same output)."""

from __future__ import annotations

import os
import time
from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.api.specs import SourceSpec
from spark_jobs.sources.generator import GeneratorSource
from tests.unit.runtime.support import small_job

_paused = False


class PausingGeneratorSource(GeneratorSource):
    def read(self, *args: Any, **kwargs: Any) -> Any:
        global _paused
        pause = float(os.environ.get("EPOCHAL_TEST_PAUSE_S", "0") or 0)
        if pause > 0 and not _paused:
            _paused = True
            time.sleep(pause)
        return super().read(*args, **kwargs)


def pausing_job(**overrides: Any) -> Job:
    job = small_job(**overrides)
    for _, spec in job.graph.steps_of(SourceSpec):
        spec.source.__class__ = PausingGeneratorSource
    return job
