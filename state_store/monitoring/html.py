"""Server-side HTML for the Checkpoints view and ``epochal report``: one self-contained page per call.

No JavaScript, no external CSS, fonts or scripts (the page must work offline and inside the Airflow
UI's iframe); charts are inline SVG. Every value taken from storage is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from state_store.monitoring.model import CheckpointDetail, CheckpointRow, SummaryStats
from state_store.monitoring.reader import JobStats

CHART_POINTS = 200
"""Charts show at most this many of the newest completed checkpoints."""

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px;color:#1a202c;font-size:14px}
h1{font-size:20px;margin:0 0 12px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;margin:4px 0 12px}
th,td{border:1px solid #e2e8f0;padding:3px 8px;text-align:left}
th{background:#f7fafc}td.n{text-align:right;font-variant-numeric:tabular-nums}
.completed{color:#276749}.failed{color:#c53030}.in_progress,.completing{color:#2b6cb0}.unreadable{color:#975a16}
.cards{display:flex;flex-wrap:wrap;gap:8px}.card{border:1px solid #e2e8f0;border-radius:6px;padding:6px 12px}
.card b{display:block;font-size:18px}.charts{display:flex;flex-wrap:wrap;gap:16px}nav a{margin-right:8px}
.muted{color:#718096}
"""


@dataclass(frozen=True)
class Links:
    """How the page links out; None from a callable means "no link"."""

    run: Callable[[CheckpointRow], str | None] = lambda row: None
    detail: Callable[[int], str | None] = lambda checkpoint_id: None
    page: Callable[[int, str | None], str | None] = lambda offset, status: None
    back: str | None = None


def dag_run_path(job_id: str, row: CheckpointRow) -> str | None:
    """The Airflow UI path of the DAG run that triggered ``row`` (relative to the UI root), or None.

    An epoch's run id belongs to ``epochal_<job>``; a restore's to ``epochal_restore``; savepoints
    taken outside a DAG run (request id ``savepoint-<name>``) and CLI runs (no request id) have none.
    """
    if not row.run_id or row.run_id.startswith("savepoint-"):
        return None
    dag_id = "epochal_restore" if row.restored_from else "epochal_" + job_id.replace("-", "_")
    return f"/dags/{quote(dag_id)}/runs/{quote(row.run_id, safe='')}"


def fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a time no calendar holds: show it, never die
        return f"{ms} ms"


def fmt_duration(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _a(href: str | None, text: str, *, top: bool = False) -> str:
    """A link (``top``: opens in the whole window, not inside the Airflow UI's iframe)."""
    target = ' target="_top"' if top else ""
    return f'<a href="{esc(href)}"{target}>{esc(text)}</a>' if href else esc(text)


def svg_chart(title: str, points: Sequence[tuple[int, float]], fmt: Callable[[float], str]) -> str:
    """A line chart of (checkpoint id, value) points as inline SVG (``<svg class="chart">``)."""
    width, height, pad = 460, 180, 40
    head = (
        f'<svg class="chart" role="img" aria-label="{esc(title)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        f'<text x="{pad}" y="14" font-size="12" font-weight="bold">{esc(title)}</text>'
    )
    if not points:
        return (
            head + f'<text x="{pad}" y="{height // 2}" font-size="12">no completed checkpoints</text></svg>'
        )
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y1 = max(ys) or 1.0
    plot_w, plot_h = width - pad - 10, height - pad - 24

    def sx(x: int) -> float:
        return pad + (0.5 if x1 == x0 else (x - x0) / (x1 - x0)) * plot_w

    def sy(y: float) -> float:
        return 24 + plot_h - (y / y1) * plot_h

    coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    dots = "".join(
        f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="#2b6cb0">'
        f"<title>checkpoint {x}: {esc(fmt(y))}</title></circle>"
        for x, y in points
    )
    axes = (
        f'<line x1="{pad}" y1="{24 + plot_h}" x2="{width - 10}" y2="{24 + plot_h}" stroke="#a0aec0"/>'
        f'<line x1="{pad}" y1="24" x2="{pad}" y2="{24 + plot_h}" stroke="#a0aec0"/>'
        f'<text x="2" y="30" font-size="10">{esc(fmt(y1))}</text>'
        f'<text x="2" y="{24 + plot_h}" font-size="10">0</text>'
        f'<text x="{pad}" y="{height - 4}" font-size="10">#{x0}</text>'
        f'<text x="{width - 10}" y="{height - 4}" font-size="10" text-anchor="end">#{x1}</text>'
    )
    line = f'<polyline fill="none" stroke="#2b6cb0" stroke-width="1.5" points="{coords}"/>'
    return head + axes + line + dots + "</svg>"


def page(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>{body}</body></html>"
    )


def _overview(stats: JobStats, links: Links) -> str:
    o = stats.overview
    cards = "".join(
        f'<div class="card" data-count="{k}"><span class="muted">{esc(label)}</span><b>{v}</b></div>'
        for k, label, v in (
            ("triggered", "triggered", o.triggered),
            ("in_progress", "in progress", o.in_progress + o.completing),
            ("completed", "completed", o.completed),
            ("failed", "failed", o.failed),
            ("restored", "restored", o.restored),
        )
    )

    def latest(label: str, r: CheckpointRow | None, extra: str) -> str:
        if r is None:
            return f"<tr><th>{esc(label)}</th><td colspan=3>none</td></tr>"
        return (
            f"<tr><th>{esc(label)}</th><td>{_a(links.detail(r.checkpoint_id), f'#{r.checkpoint_id}')}</td>"
            f"<td>{esc(fmt_ms(r.end_ms or r.trigger_ms))}</td><td>{esc(extra)}</td></tr>"
        )

    rows = "".join(
        (
            latest(
                "latest completed",
                o.latest_completed,
                fmt_bytes(o.latest_completed.state_size) if o.latest_completed else "",
            ),
            latest("latest savepoint", o.latest_savepoint, ""),
            latest("latest failure", o.latest_failure, o.latest_failure.reason if o.latest_failure else ""),
            latest(
                "latest restore",
                o.latest_restore,
                f"from {o.latest_restore.restored_from}" if o.latest_restore else "",
            ),
        )
    )
    return (
        f'<h2>Overview</h2><div class="cards">{cards}</div>'
        f'<table class="latest">{rows}</table>'
        f'<p class="muted">generation {o.generation}; highest checkpoint id {o.highest_id}; '
        f"{o.triggered} checkpoints in storage (retention removes older ones)</p>"
    )


def _summary(stats: JobStats) -> str:
    def row(label: str, s: SummaryStats, fmt: Callable[[float | None], str]) -> str:
        cells = "".join(
            f'<td class="n">{esc(fmt(getattr(s, k)))}</td>' for k in ("min", "avg", "p50", "p99", "max")
        )
        return f"<tr><th>{esc(label)}</th>{cells}<td class='n'>{s.count}</td></tr>"

    return (
        '<h2>Summary (completed checkpoints)</h2><table class="summary"><tr><th></th><th>min</th><th>avg</th>'
        "<th>p50</th><th>p99</th><th>max</th><th>count</th></tr>"
        + row("end-to-end duration", stats.duration, fmt_duration)
        + row("checkpointed size", stats.state_size, fmt_bytes)
        + row("incremental size", stats.incremental_size, fmt_bytes)
        + "</table>"
    )


def _charts(stats: JobStats) -> str:
    done = [r for r in stats.rows if r.status == "completed"][-CHART_POINTS:]
    durations = [(r.checkpoint_id, float(r.duration_ms or 0)) for r in done]
    sizes = [(r.checkpoint_id, float(r.state_size)) for r in done]
    return (
        '<h2>Charts</h2><div class="charts">'
        + svg_chart("end-to-end duration", durations, fmt_duration)
        + svg_chart("checkpointed size", sizes, fmt_bytes)
        + "</div>"
    )


def history_table(rows: Sequence[CheckpointRow], links: Links) -> str:
    head = (
        "<tr><th>id</th><th>status</th><th>triggered (UTC)</th><th>duration</th><th>acked</th>"
        "<th>checkpointed size</th><th>incremental size</th><th>alignment</th><th>DAG run</th>"
        "<th>validation</th></tr>"
    )
    body = []
    for r in rows:
        kind = " (savepoint)" if r.savepoint else ""
        reason = f'<br><span class="muted">{esc(r.reason)}</span>' if r.reason else ""
        body.append(
            f'<tr class="checkpoint" data-id="{r.checkpoint_id}" data-status="{esc(r.status)}">'
            f"<td>{_a(links.detail(r.checkpoint_id), str(r.checkpoint_id))}</td>"
            f'<td class="{esc(r.status)}">{esc(r.status)}{kind}{reason}</td>'
            f"<td>{esc(fmt_ms(r.trigger_ms))}</td><td class='n'>{esc(fmt_duration(r.duration_ms))}</td>"
            f"<td class='n'>{r.acked}/{r.expected}</td><td class='n'>{esc(fmt_bytes(r.state_size))}</td>"
            f"<td class='n'>{esc(fmt_bytes(r.incremental_size))}</td>"
            f"<td class='n'>{esc(fmt_duration(r.alignment_ms) if r.alignment_ms is not None else 'n/a')}</td>"
            f"<td>{_a(links.run(r), r.run_id, top=True) if r.run_id else '-'}</td>"
            f'<td title="{esc(r.validation_detail)}">{esc(r.validation)}</td></tr>'
        )
    return f'<table class="history">{head}{"".join(body)}</table>'


def _pager(stats: JobStats, offset: int, limit: int, status: str | None, links: Links) -> str:
    total = stats.count(status)
    parts = [f"checkpoints {min(offset + 1, total)}-{min(offset + limit, total)} of {total}, newest first"]
    if offset > 0:
        parts.append(_a(links.page(max(0, offset - limit), status), "newer"))
    if offset + limit < total:
        parts.append(_a(links.page(offset + limit, status), "older"))
    return f'<p class="pager">{" · ".join(parts)}</p>'


def _configuration(config: dict[str, Any]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in config.items())
    return f'<h2>Configuration</h2><table class="configuration">{rows}</table>'


def job_page(
    stats: JobStats,
    *,
    offset: int = 0,
    limit: int = 50,
    status: str | None = None,
    links: Links | None = None,
    configuration: dict[str, Any] | None = None,
    title: str | None = None,
    nav: str = "",
) -> str:
    """The Checkpoints page of one job: overview, summary, charts, one history page, configuration."""
    links = links or Links()
    rows = stats.page(offset=offset, limit=limit, status=status)
    heading = title or f"Checkpoints of job {stats.job_id}"
    body = (
        f"{nav}<h1>{esc(heading)}</h1>"
        + _overview(stats, links)
        + _summary(stats)
        + _charts(stats)
        + "<h2>History</h2>"
        + _pager(stats, offset, limit, status, links)
        + history_table(rows, links)
        + _configuration(configuration if configuration is not None else stats.configuration)
    )
    return page(heading, body)


def detail_page(detail: CheckpointDetail, *, links: Links | None = None, nav: str = "") -> str:
    """Per-operator and per-subtask detail of one checkpoint."""
    links = links or Links()
    r = detail.row
    ops = []
    for op in detail.operators:
        subs = "".join(
            f'<tr class="subtask"><td>{s.subtask}</td><td class="{esc(s.status)}">{esc(s.status)}</td>'
            f"<td class='n'>{s.attempt}</td><td class='n'>{esc(fmt_bytes(s.state_size))}</td>"
            f"<td class='n'>{esc(fmt_bytes(s.bytes_written))}</td><td class='n'>{s.files}</td>"
            f"<td>{esc(', '.join(f'{k}={v}' for k, v in sorted(s.metrics.items())))}{esc(s.reason)}</td></tr>"
            for s in op.subtasks
        )
        ops.append(
            f'<h3 class="operator">{esc(op.uid)}: {op.acked}/{len(op.subtasks)} acknowledged, '
            f"{esc(fmt_bytes(op.state_size))} checkpointed, {esc(fmt_bytes(op.bytes_written))} written</h3>"
            "<table><tr><th>subtask</th><th>status</th><th>attempt</th><th>state size</th>"
            f"<th>written</th><th>files</th><th>metrics</th></tr>{subs}</table>"
        )
    back = f"<nav>{_a(links.back, 'back to the history')}</nav>" if links.back else ""
    heading = f"Checkpoint {r.checkpoint_id}"
    body = (
        f"{nav}{back}<h1>{esc(heading)}</h1>"
        + history_table([r], links)
        + f'<p class="muted">attempt {detail.attempt}; '
        + f"validation: {esc(r.validation_detail or r.validation)}</p>"
        + "<h2>Operators</h2>"
        + "".join(ops)
        + _configuration({"positions": detail.positions})
    )
    return page(f"Checkpoint {r.checkpoint_id}", body)
