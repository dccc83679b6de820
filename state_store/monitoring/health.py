"""One line per job on the Checkpoints landing page: health, latest completed checkpoint and its age,
failures in the last day, the state-size trend. Computed from :class:`~.reader.JobStats` and a
``now_ms`` the caller passes (the view's wall clock), so tests fix the time.

Health (first rule that matches):

* ``no checkpoints`` -- nothing was ever triggered;
* ``failing`` -- the newest decided checkpoint failed (the job has not recovered since);
* ``in progress`` -- nothing completed yet, one is in flight;
* ``healthy`` -- the newest decided checkpoint completed.
"""

from __future__ import annotations

from dataclasses import dataclass

from state_store.monitoring.model import CheckpointRow
from state_store.monitoring.reader import JobStats

DAY_MS = 24 * 3600 * 1000
TREND_POINTS = 20
HEALTH = ("healthy", "failing", "in progress", "no checkpoints")


@dataclass(frozen=True, slots=True)
class JobHealth:
    job_id: str
    health: str  # one of HEALTH
    latest_completed: CheckpointRow | None
    age_ms: int | None  # now - the latest completed checkpoint's end (None: none completed)
    failures_24h: int  # failed checkpoints triggered within DAY_MS before now
    trend: tuple[tuple[int, float], ...]  # (checkpoint id, state size) of the newest completed
    last_failure: CheckpointRow | None


def job_health(stats: JobStats, now_ms: int) -> JobHealth:
    rows = stats.rows
    decided = [r for r in rows if r.status in ("completed", "failed")]
    done = [r for r in rows if r.status == "completed"]
    if not rows:
        health = "no checkpoints"
    elif decided and decided[-1].status == "failed":
        health = "failing"
    elif not decided:
        health = "in progress"
    else:
        health = "healthy"
    latest = stats.overview.latest_completed or (done[-1] if done else None)
    end = None if latest is None else (latest.end_ms or latest.trigger_ms)
    return JobHealth(
        job_id=stats.job_id,
        health=health,
        latest_completed=latest,
        age_ms=None if end is None else max(0, now_ms - end),
        failures_24h=sum(1 for r in rows if r.status == "failed" and now_ms - r.trigger_ms <= DAY_MS),
        trend=tuple((r.checkpoint_id, float(r.state_size)) for r in done[-TREND_POINTS:]),
        last_failure=stats.overview.latest_failure,
    )
