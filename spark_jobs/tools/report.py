"""``epochal report``: one self-contained HTML page of a job's checkpoints, for people without
Airflow access -- the same overview, summary statistics, charts, history table and configuration as
the Airflow Checkpoints view (both render :mod:`state_store.monitoring.html` from storage alone).

The file embeds its CSS and inline SVG charts; it loads nothing from the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from state_store.core.ports import ObjectStore
from state_store.monitoring import CheckpointRow, CheckpointStats
from state_store.monitoring import html as render

MAX_ROWS = 10_000


@dataclass(frozen=True)
class ReportResult:
    path: Path
    checkpoints: int
    rows_shown: int


def write_report(
    store: ObjectStore, job_id: str, out: str | Path, *, limit: int = 1000, airflow_url: str | None = None
) -> ReportResult:
    """Write the report of ``job_id`` to ``out`` (an ``.html`` path); ValueError on bad input."""
    path = Path(out)
    if path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"report --out {str(out)!r} must end in .html: the report is one HTML page")
    if not 1 <= limit <= MAX_ROWS:
        raise ValueError(f"report --limit {limit} is invalid: use 1..{MAX_ROWS} history rows")
    if not path.parent.is_dir():
        raise ValueError(
            f"report --out {str(out)!r}: folder {str(path.parent)!r} does not exist; create it first"
        )
    stats = CheckpointStats(store, max_age_ms=0).stats(job_id)
    if not stats.rows:
        raise ValueError(
            f"job {job_id} has no checkpoints in {store.uri}: check --job and --store "
            "(see `epochal checkpoints list`)"
        )
    base = airflow_url.rstrip("/") if airflow_url else None

    def run_link(row: CheckpointRow) -> str | None:
        path = render.dag_run_path(job_id, row)
        return f"{base}{path}" if base and path else None

    shown = min(limit, len(stats.rows))
    page = render.job_page(
        stats,
        limit=shown,
        links=render.Links(run=run_link),
        title=f"Checkpoint report of job {job_id} ({store.uri})",
    )
    path.write_text(page, encoding="utf-8")
    return ReportResult(path, len(stats.rows), shown)
