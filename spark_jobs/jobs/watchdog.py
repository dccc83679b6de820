"""Fail an epoch fast when a Spark executor is lost mid-epoch (Flink's failover on a lost
TaskManager: the job restarts from the latest completed checkpoint).

Without it, a standalone cluster that loses its only worker leaves the epoch's tasks waiting for
resources forever: Spark does not count a task lost with its worker as a task failure. The
watchdog polls the driver's executor ids while the epoch runs; when an executor it has seen
disappears it records which and cancels every Spark job, so the epoch attempt fails at once, the
``run_epoch`` task fails, and the next attempt (an Airflow retry or the next DAG run) restores from
the latest completed checkpoint. Invariants: it never cancels after :meth:`stop`; it is inert when
the cluster has no executors apart from the driver (``local[*]``).

With dynamic allocation, idle executors are removed on purpose: use ``--on-executor-loss wait``.
"""

from __future__ import annotations

import threading
from typing import Any


class ExecutorLostError(RuntimeError):
    """Executors disappeared while the epoch ran; the message names them and what happens next."""


class ExecutorLossWatchdog:
    def __init__(self, spark: Any, interval_s: float = 0.5) -> None:
        self._sc = spark.sparkContext
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="epochal-executor-watchdog", daemon=True)
        self.seen: set[str] = set()
        self.lost: set[str] = set()

    def executor_ids(self) -> set[str]:
        # PySpark has no public call for the live executors; the JVM SparkContext has one
        text = str(self._sc._jsc.sc().getExecutorIds().mkString(","))  # noqa: SLF001
        return {i for i in text.split(",") if i}

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                current = self.executor_ids()
            except Exception:  # the context is stopping: nothing left to watch
                return
            gone = self.seen - current
            self.seen |= current
            if gone and not self._stop.is_set():
                self.lost |= gone
                self._sc.cancelAllJobs()
                return

    def __enter__(self) -> ExecutorLossWatchdog:
        self.seen = self.executor_ids()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def error(self) -> ExecutorLostError | None:
        if not self.lost:
            return None
        return ExecutorLostError(
            f"executor(s) {', '.join(sorted(self.lost))} lost mid-epoch: the epoch attempt fails; the next "
            "attempt restores from the latest completed checkpoint"
        )
