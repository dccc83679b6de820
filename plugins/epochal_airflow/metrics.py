"""Checkpoint metrics through Airflow's metrics (``airflow.sdk.observability.stats``: StatsD, Datadog
or OpenTelemetry, as configured in ``[metrics]``), every one tagged with the job id (tag ``epochal_job``).

Emitted by :func:`emit_checkpoint_metrics` for checkpoint n, from storage (the same numbers as the
Checkpoints view), by the ``complete_checkpoint`` task:

=====================================  =======  ====================================================
``epochal.checkpoint.duration``        timing   end-to-end ms (trigger -> completion or abort)
``epochal.checkpoint.state_size``      gauge    bytes the checkpoint references (completed only)
``epochal.checkpoint.incremental_size`` gauge   bytes uploaded by the checkpoint (completed only)
``epochal.checkpoint.acks``            gauge    acknowledged subtasks (n of ``expected_acks``)
``epochal.checkpoint.expected_acks``   gauge    subtasks that must acknowledge
``epochal.checkpoint.completed``       counter  +1 per completed checkpoint
``epochal.checkpoint.failed``          counter  +1 per failed checkpoint (tag ``reason``)
``epochal.checkpoint.restored``        counter  +1 per checkpoint that is a restore
``epochal.checkpoints.<status>``       gauge    counts over the checkpoints in storage (completed,
                                                failed, in_progress, restored)
=====================================  =======  ====================================================

With StatsD, tags travel only with ``statsd_influxdb_enabled`` (``name,job_id=x:v|g``) or Datadog;
plain StatsD drops them (Airflow's behaviour). Emitting never raises: metrics must not fail an epoch.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from state_store.core.ports import ObjectStore
from state_store.monitoring import CheckpointRow, CheckpointStats, Overview

log = logging.getLogger(__name__)
PREFIX = "epochal"
#: The tag carrying the Epochal job id. Not ``job_id``: Airflow's ``statsd_disabled_tags`` drops
#: ``job_id`` by default (it means an Airflow scheduler job there).
TAG = "epochal_job"


def emit_row(row: CheckpointRow, overview: Overview, *, stats: Any = None) -> list[str]:
    """Emit the metrics of one history row and the job's counts; return the metric names sent."""
    if stats is None:
        from airflow.sdk.observability import stats as airflow_stats

        stats = airflow_stats
    tags = {TAG: overview.job_id}
    sent: list[str] = []

    def gauge(name: str, value: float, extra: dict[str, str] | None = None) -> None:
        stats.gauge(f"{PREFIX}.{name}", value, tags={**tags, **(extra or {})})
        sent.append(name)

    def incr(name: str, extra: dict[str, str] | None = None) -> None:
        stats.incr(f"{PREFIX}.{name}", tags={**tags, **(extra or {})})
        sent.append(name)

    if row.duration_ms is not None:
        stats.timing(f"{PREFIX}.checkpoint.duration", timedelta(milliseconds=row.duration_ms), tags=tags)
        sent.append("checkpoint.duration")
    gauge("checkpoint.acks", row.acked)
    gauge("checkpoint.expected_acks", row.expected)
    if row.status == "completed":
        gauge("checkpoint.state_size", row.state_size)
        gauge("checkpoint.incremental_size", row.incremental_size)
        incr("checkpoint.completed")
    elif row.status == "failed":
        incr("checkpoint.failed", {"reason": row.reason.split(":", 1)[0] or "UNKNOWN"})
    if row.restored_from:
        incr("checkpoint.restored")
    for name, value in (
        ("completed", overview.completed),
        ("failed", overview.failed),
        ("in_progress", overview.in_progress + overview.completing),
        ("restored", overview.restored),
    ):
        gauge(f"checkpoints.{name}", value)
    return sent


def emit_checkpoint_metrics(
    store: ObjectStore, job_id: str, checkpoint_id: int, *, stats: Any = None
) -> list[str]:
    """Read checkpoint n's statistics from storage and emit them; [] (logged) if that fails."""
    try:
        job_stats = CheckpointStats(store, max_age_ms=0).stats(job_id)
        row = next((r for r in job_stats.rows if r.checkpoint_id == checkpoint_id), None)
        if row is None:
            log.warning("epochal metrics: checkpoint %s of job %s is not in storage", checkpoint_id, job_id)
            return []
        return emit_row(row, job_stats.overview, stats=stats)
    except Exception:  # never fail the epoch for a metric
        log.exception("epochal metrics: could not emit the metrics of checkpoint %s", checkpoint_id)
        return []
