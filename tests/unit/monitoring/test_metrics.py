"""Checkpoint metrics go through Airflow's own StatsD logger to a real UDP listener on loopback,
tagged with the job id (influxdb-style tags), with the values the manifests hold."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from epochal_airflow.metrics import emit_checkpoint_metrics

from state_store.core import JobLayout, load_completed
from state_store.storage import open_store
from tests.unit.monitoring.support import JOB_ID, Made


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(2.0)
    for key, value in {
        "STATSD_ON": "True",
        "STATSD_HOST": "127.0.0.1",
        "STATSD_PORT": str(sock.getsockname()[1]),
        "STATSD_PREFIX": "airflow",
        "STATSD_INFLUXDB_ENABLED": "True",
    }.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    yield sock
    monkeypatch.undo()
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    sock.close()


def received(sock: socket.socket, count: int) -> dict[str, str]:
    """name (with tags) -> 'value|type' for ``count`` datagrams."""
    out: dict[str, str] = {}
    while len(out) < count:
        for line in sock.recv(65535).decode().splitlines():
            name, _, value = line.partition(":")
            out[name] = value
    return out


def test_completed_checkpoint_metrics_reach_statsd_with_the_job_tag(
    statsd: socket.socket, history: Made
) -> None:
    store = open_store(history.uri)
    n = history.completed[-1]
    sent = emit_checkpoint_metrics(store, JOB_ID, n)
    assert "checkpoint.duration" in sent and "checkpoint.state_size" in sent
    got = received(statsd, len(sent))
    meta = load_completed(store, JobLayout(JOB_ID), n).metadata
    tag = f",epochal_job={JOB_ID}"
    duration = meta.wall_completed_ms - meta.wall_trigger_ms  # wall-clock: true
    assert got[f"airflow.epochal.checkpoint.duration{tag}"] == f"{duration:.6f}|ms"
    assert got[f"airflow.epochal.checkpoint.state_size{tag}"] == f"{meta.state_size}|g"
    assert got[f"airflow.epochal.checkpoint.acks{tag}"] == f"{len(meta.tasks)}|g"
    assert got[f"airflow.epochal.checkpoint.completed{tag}"] == "1|c"
    assert got[f"airflow.epochal.checkpoints.failed{tag}"] == "1|g"


def test_failed_checkpoint_counts_a_failure_with_its_reason(statsd: socket.socket, history: Made) -> None:
    sent = emit_checkpoint_metrics(open_store(history.uri), JOB_ID, history.failed)
    got = received(statsd, len(sent))
    assert got[f"airflow.epochal.checkpoint.failed,epochal_job={JOB_ID},reason=MANUALLY_ABORTED"] == "1|c"
    assert not any("state_size" in k for k in got)


def test_metrics_never_raise_for_a_missing_checkpoint(history: Made) -> None:
    assert emit_checkpoint_metrics(open_store(history.uri), JOB_ID, 999) == []
