"""Flink's failure-rate restart strategy for an epoch-cycle DAG: tolerate up to ``max_failures``
failures per ``interval``; beyond that, stop restarting -- the trigger task fails the run with the
reason and pauses the DAG (no more scheduled epochs until an operator unpauses it).

Failures are counted from storage, not from Airflow's task-instance history: one failure is one
*aborted* checkpoint of the job (a run that died is aborted as ``JOB_FAILOVER`` by the next run's
trigger; declined, expired or failed-to-complete checkpoints are aborted by the coordinator) whose
abort was decided within ``interval`` of the run's clock. Storage is the one history that survives
a new Airflow metadata DB, a renamed DAG and a restore, and is what ``epochal checkpoints list``
shows. A failure before any checkpoint is triggered (e.g. an unreachable store) is not counted.

Pausing uses the public CLI ``airflow dags pause <dag_id>`` in a subprocess (Airflow 3 tasks must not
open metadata-DB sessions themselves); it needs the worker's Airflow configuration to reach the
metadata DB, as in ``airflow dags test`` and the standard deployments.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from state_store.core import checkpoint_history
from state_store.core.ports import ObjectStore


@dataclass(frozen=True)
class FailureRate:
    failures: list[int]  # aborted checkpoint ids within the interval
    max_failures: int
    interval_s: float

    @property
    def exceeded(self) -> bool:
        return len(self.failures) > self.max_failures

    def reason(self, job_id: str) -> str:
        return (
            f"failure-rate restart strategy of job {job_id} exceeded: {len(self.failures)} failed "
            f"checkpoints {self.failures} within {self.interval_s:g}s (max {self.max_failures})"
        )


def failure_rate(
    store: ObjectStore, job_id: str, now_ms: int, max_failures: int, interval_s: float
) -> FailureRate:
    """The job's aborted checkpoints decided in ``(now - interval, now]``."""
    since = now_ms - int(interval_s * 1000)
    failures = [
        r.checkpoint_id
        for r in checkpoint_history(store, job_id)
        if r.status == "aborted" and r.end_ms is not None and since < r.end_ms <= now_ms
    ]
    return FailureRate(failures, max_failures, interval_s)


def pause_dag(dag_id: str, timeout_s: float = 120) -> str:
    """Pause ``dag_id`` with ``airflow dags pause``; returns what happened, in one line."""
    airflow = shutil.which("airflow") or str(Path(sys.executable).parent / "airflow")
    try:
        result = subprocess.run(
            [airflow, "dags", "pause", dag_id],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not pause DAG {dag_id} ({exc}): pause it by hand"
    out = (result.stdout + result.stderr).strip()
    if result.returncode != 0:
        last = out.splitlines()[-1] if out else f"exit {result.returncode}"
        return f"could not pause DAG {dag_id} ({last}): pause it by hand"
    if "No paused DAGs were found" in out or "No unpaused" in out:
        return f"DAG {dag_id} was not paused (not in the metadata DB, or already paused)"
    return f"DAG {dag_id} paused: unpause it after fixing the cause"
