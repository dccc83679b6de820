"""Checkpoint monitoring: statistics rebuilt from storage (see ``model`` and ``reader``) and their
HTML rendering (``html``), shared by the Airflow Checkpoints view, its REST API and ``epochal report``."""

from state_store.monitoring.model import (
    STATUSES,
    CheckpointDetail,
    CheckpointRow,
    OperatorDetail,
    Overview,
    SubtaskDetail,
    SummaryStats,
    build_overview,
    percentile,
    summarize,
)
from state_store.monitoring.reader import CheckpointStats, JobStats, MonitoringError

__all__ = [
    "STATUSES",
    "CheckpointDetail",
    "CheckpointRow",
    "CheckpointStats",
    "JobStats",
    "MonitoringError",
    "OperatorDetail",
    "Overview",
    "SubtaskDetail",
    "SummaryStats",
    "build_overview",
    "percentile",
    "summarize",
]
