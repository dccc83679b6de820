"""Server-side HTML for the Checkpoints view and ``epochal report``: one self-contained page per call.

Styled like Airflow 3's own pages (its Chakra UI look: system font stack, gray-200 rules, uppercase
gray table headers, state badges in Airflow's state colours, underlined tabs) with plain CSS. No
JavaScript, no external CSS, fonts or scripts (the page must work offline and inside the Airflow UI's
iframe); charts are inline SVG. Every value taken from storage is escaped; durations, sizes and
times are humanized (:mod:`state_store.monitoring.fmt`), never epoch milliseconds or raw dicts.

Pages: :func:`jobs_page` (every job: health, latest completed checkpoint and its age, failures in the
last day, state-size trend; broken jobs with their error), :func:`job_page` (Flink's tabs: overview,
history, summary, configuration, plus savepoints; ``tab=None`` renders every section, as the report
does), :func:`detail_page` (one checkpoint per operator, subtasks and their metrics as columns).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from state_store.monitoring.fmt import fmt_age, fmt_bytes, fmt_duration, fmt_time, fmt_value, label
from state_store.monitoring.health import JobHealth
from state_store.monitoring.model import CheckpointDetail, CheckpointRow, SummaryStats
from state_store.monitoring.reader import JobStats
from state_store.monitoring.savepoints import SavepointInfo

__all__ = [
    "TABS",
    "Links",
    "dag_run_path",
    "detail_page",
    "esc",
    "fmt_bytes",
    "fmt_duration",
    "fmt_ms",
    "history_table",
    "job_page",
    "jobs_page",
    "page",
    "svg_chart",
]
CHART_POINTS = 200
"""Charts show at most this many of the newest completed checkpoints."""
TABS = ("overview", "history", "summary", "configuration", "savepoints")
fmt_ms = fmt_time  # the name older callers import

_CSS = """
:root{--fg:#1a202c;--muted:#718096;--line:#e2e8f0;--head:#f7fafc;--brand:#017cee}
body{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif,"Apple Color Emoji";
margin:0;padding:16px 24px;color:var(--fg);font-size:14px;line-height:1.5;background:#fff}
a{color:#2b6cb0;text-decoration:none}a:hover{text-decoration:underline}
h1{font-size:24px;font-weight:600;margin:4px 0 12px}h2{font-size:18px;font-weight:600;margin:20px 0 8px}
h3{font-size:15px;font-weight:600;margin:16px 0 6px}
table{border-collapse:collapse;margin:4px 0 16px;min-width:40%}
th,td{border-bottom:1px solid var(--line);padding:6px 12px;text-align:left;vertical-align:top}
thead th,tr.head th{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);
font-weight:600;background:var(--head)}
table.kv th{color:var(--muted);font-weight:500;width:16em}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;border-radius:9999px;padding:0 8px;font-size:12px;font-weight:600;color:#fff}
.completed,.healthy,.acked{background:#38a169}.failed,.failing,.declined{background:#e53e3e}
.in_progress,.completing,.in.progress,.pending{background:#3182ce}.unreadable{background:#dd6b20}
.no.checkpoints{background:#a0aec0}.kind{background:#805ad5}.kind.checkpoint{background:#a0aec0}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0 16px}
.card{border:1px solid var(--line);border-radius:6px;padding:8px 16px;min-width:96px}
.card b{display:block;font-size:22px;font-weight:600}.charts{display:flex;flex-wrap:wrap;gap:16px}
.muted{color:var(--muted)}nav.crumbs{color:var(--muted);margin-bottom:4px}nav.crumbs a{margin-right:4px}
nav.tabs{display:flex;gap:4px;border-bottom:1px solid var(--line);margin:8px 0 16px}
nav.tabs a{padding:8px 14px;color:var(--muted);border-bottom:2px solid transparent;font-weight:500}
nav.tabs a.active{color:var(--brand);border-bottom-color:var(--brand)}
nav.tabs a:hover{text-decoration:none;color:var(--fg)}
.button{display:inline-block;border:1px solid var(--brand);color:var(--brand);border-radius:6px;
padding:2px 10px;margin-right:6px;font-size:13px}
.error{color:#c53030}svg.trend{vertical-align:middle}
"""


@dataclass(frozen=True)
class Links:
    """How the page links out; None from a callable means "no link"."""

    run: Callable[[CheckpointRow], str | None] = lambda row: None
    detail: Callable[[int], str | None] = lambda checkpoint_id: None
    page: Callable[[int, str | None], str | None] = lambda offset, status: None
    back: str | None = None
    tab: Callable[[str], str | None] = lambda name: None
    job: Callable[[str], str | None] = lambda job_id: None
    action: Callable[[str, SavepointInfo], str | None] = lambda kind, savepoint: None
    """``kind`` is ``restore`` or ``backfill``: the page that triggers that DAG from the savepoint."""


def dag_run_path(job_id: str, row: CheckpointRow) -> str | None:
    """The Airflow UI path of the DAG run that triggered ``row`` (relative to the UI root), or None.

    An epoch's run id belongs to ``epochal_<job>``; a restore's to ``epochal_restore``; savepoints
    taken outside a DAG run (request id ``savepoint-<name>``) and CLI runs (no request id) have none.
    """
    if not row.run_id or row.run_id.startswith("savepoint-"):
        return None
    dag_id = "epochal_restore" if row.restored_from else "epochal_" + job_id.replace("-", "_")
    return f"/dags/{quote(dag_id)}/runs/{quote(row.run_id, safe='')}"


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _a(href: str | None, text: str, *, top: bool = False, cls: str = "", attrs: str = "") -> str:
    """A link (``top``: opens in the whole window, not inside the Airflow UI's iframe)."""
    target = ' target="_top"' if top else ""
    klass = f' class="{cls}"' if cls else ""
    return f'<a href="{esc(href)}"{target}{klass}{attrs}>{esc(text)}</a>' if href else esc(text)


def badge(text: str, cls: str | None = None) -> str:
    return f'<span class="badge {esc(cls or text)}">{esc(text)}</span>'


def svg_chart(title: str, points: Sequence[tuple[int, float]], fmt: Callable[[float], str]) -> str:
    """A line chart of (checkpoint id, value) points as inline SVG (``<svg class="chart">``)."""
    width, height, pad = 460, 180, 56
    head = (
        f'<svg class="chart" role="img" aria-label="{esc(title)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        f'<text x="{pad}" y="14" font-size="12" font-weight="600" fill="#4a5568">{esc(title)}</text>'
    )
    if not points:
        return (
            head + f'<text x="{pad}" y="{height // 2}" font-size="12">no completed checkpoints</text></svg>'
        )
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y1 = max(ys) or 1.0
    plot_w, plot_h = width - pad - 10, height - 24 - 24

    def sx(x: int) -> float:
        return pad + (0.5 if x1 == x0 else (x - x0) / (x1 - x0)) * plot_w

    def sy(y: float) -> float:
        return 24 + plot_h - (y / y1) * plot_h

    coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    dots = "".join(
        f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="#017cee">'
        f"<title>checkpoint {x}: {esc(fmt(y))}</title></circle>"
        for x, y in points
    )
    axes = (
        f'<line x1="{pad}" y1="{24 + plot_h}" x2="{width - 10}" y2="{24 + plot_h}" stroke="#cbd5e0"/>'
        f'<line x1="{pad}" y1="24" x2="{pad}" y2="{24 + plot_h}" stroke="#cbd5e0"/>'
        f'<text x="2" y="30" font-size="10" fill="#718096">{esc(fmt(y1))}</text>'
        f'<text x="2" y="{24 + plot_h}" font-size="10" fill="#718096">0</text>'
        f'<text x="{pad}" y="{height - 4}" font-size="10" fill="#718096">#{x0}</text>'
        f'<text x="{width - 10}" y="{height - 4}" font-size="10" text-anchor="end" '
        f'fill="#718096">#{x1}</text>'
    )
    line = f'<polyline fill="none" stroke="#017cee" stroke-width="2" points="{coords}"/>'
    return head + axes + line + dots + "</svg>"


def sparkline(points: Sequence[tuple[int, float]], fmt: Callable[[float], str] = fmt_bytes) -> str:
    """A small trend line (``<svg class="trend">``) with the newest value beside it."""
    if not points:
        return '<span class="muted">-</span>'
    w, h = 120, 24
    ys = [p[1] for p in points]
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or 1.0
    step = w / max(1, len(points) - 1)
    coords = " ".join(
        f"{i * step:.1f},{h - 2 - (y - lo) / span * (h - 4):.1f}" for i, (_, y) in enumerate(points)
    )
    title = f"state size of checkpoints #{points[0][0]}..#{points[-1][0]}: {fmt(lo)} .. {fmt(hi)}"
    return (
        f'<svg class="trend" width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{esc(title)}</title>"
        f'<polyline fill="none" stroke="#017cee" stroke-width="1.5" points="{coords}"/>'
        f'<circle cx="{coords.rsplit(" ", 1)[-1].split(",")[0]}" cy="{coords.rsplit(",", 1)[-1]}" r="2" '
        'fill="#017cee"/>'  # the newest point, visible even when it is the only one
        f"</svg> {esc(fmt(ys[-1]))}"
    )


def page(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>{body}</body></html>"
    )


def _table(head: Sequence[str], rows: Sequence[str], cls: str) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


# -- the landing page -----------------------------------------------------------------------------
def jobs_page(
    healths: Sequence[JobHealth],
    broken: Mapping[str, str],
    *,
    now_ms: int,
    links: Links | None = None,
    errors: Mapping[str, str] | None = None,
) -> str:
    """Every job in one table (``tr.job[data-job]``), then the jobs that do not load (``tr.broken``)."""
    links = links or Links()
    rows = []
    for h in healths:
        latest = h.latest_completed
        job_href = links.job(h.job_id)
        latest_cell = (
            _a(f"{job_href}/{latest.checkpoint_id}" if job_href else None, f"#{latest.checkpoint_id}")
            if latest
            else "none"
        )
        age = fmt_age(latest.end_ms or latest.trigger_ms, now_ms) if latest else "-"
        failures = f"{h.failures_24h}" + (
            f' <span class="muted">({esc((h.last_failure.reason or "")[:80])})</span>'
            if h.failures_24h and h.last_failure
            else ""
        )
        rows.append(
            f'<tr class="job" data-job="{esc(h.job_id)}" data-health="{esc(h.health)}">'
            f"<td>{_a(links.job(h.job_id), h.job_id, cls='job')}</td><td>{badge(h.health)}</td>"
            f"<td>{latest_cell}</td><td>{esc(age)}</td>"
            f"<td class='n'>{failures}</td><td>{sparkline(h.trend)}</td></tr>"
        )
    for job_id, error in (errors or {}).items():
        rows.append(
            f'<tr class="job" data-job="{esc(job_id)}" data-health="unreadable">'
            f"<td>{_a(links.job(job_id), job_id, cls='job')}</td><td>{badge('unreadable')}</td>"
            f'<td colspan="4" class="error">{esc(error)}</td></tr>'
        )
    body = "<h1>Checkpoints</h1>"
    if rows:
        body += _table(
            ("job", "health", "latest completed", "age", "failures (24 h)", "state size trend"), rows, "jobs"
        )
    elif not broken:
        body += "<p>No jobs configured: set EPOCHAL_JOBS (see docs/writing-jobs.md).</p>"
    if broken:
        body += "<h2>Jobs that do not load</h2>" + _table(
            ("job reference", "error and remedy"),
            [
                f'<tr class="broken"><td>{esc(ref)}</td><td class="error">{esc(error)}</td></tr>'
                for ref, error in broken.items()
            ],
            "broken",
        )
    return page("Checkpoints", body)


# -- one job ------------------------------------------------------------------------------------
def _kind(row: CheckpointRow) -> str:
    return "restore" if row.restored_from else "savepoint" if row.savepoint else "checkpoint"


def _lineage(row: CheckpointRow, savepoints: Sequence[SavepointInfo], links: Links) -> str:
    """Where a restore came from, and which savepoint a savepoint checkpoint is."""
    if row.restored_from:
        source = row.restored_from
        if "/savepoints/" in source:
            name = source.rstrip("/").rsplit("/", 1)[-1]
            return f"restored from savepoint {_a(links.tab('savepoints'), name)}"
        tail = source.rstrip("/").rsplit("/", 1)[-1]
        if tail.startswith("chk-") and tail[4:].isdigit():
            n = int(tail[4:])
            return f"restored from checkpoint {_a(links.detail(n), f'#{n}')}"
        return f"restored from {esc(source)}"
    names = [s.name for s in savepoints if s.checkpoint_id == row.checkpoint_id]
    if row.savepoint:
        return "savepoint " + ", ".join(esc(n) for n in names) if names else "savepoint"
    return ""


def history_table(
    rows: Sequence[CheckpointRow], links: Links, savepoints: Sequence[SavepointInfo] = ()
) -> str:
    body = []
    for r in rows:
        reason = f'<br><span class="muted">{esc(r.reason)}</span>' if r.reason else ""
        kind = _kind(r)
        body.append(
            f'<tr class="checkpoint" data-id="{r.checkpoint_id}" data-status="{esc(r.status)}" '
            f'data-kind="{kind}">'
            f"<td>{_a(links.detail(r.checkpoint_id), str(r.checkpoint_id))}</td>"
            f"<td>{badge(r.status.replace('_', ' '), r.status)}{reason}</td>"
            f"<td>{badge(kind, 'kind ' + kind)} {_lineage(r, savepoints, links)}</td>"
            f"<td>{esc(fmt_time(r.trigger_ms))}</td><td class='n'>{esc(fmt_duration(r.duration_ms))}</td>"
            f"<td class='n'>{r.acked}/{r.expected}</td><td class='n'>{esc(fmt_bytes(r.state_size))}</td>"
            f"<td class='n'>{esc(fmt_bytes(r.incremental_size))}</td>"
            f"<td class='n'>{esc(fmt_duration(r.alignment_ms) if r.alignment_ms is not None else 'n/a')}</td>"
            f"<td>{_a(links.run(r), r.run_id, top=True) if r.run_id else '-'}</td>"
            f'<td title="{esc(r.validation_detail)}">{esc(r.validation.replace("_", " "))}</td></tr>'
        )
    head = (
        "id", "status", "kind and lineage", "triggered (UTC)", "duration", "acknowledged",
        "checkpointed size", "incremental size", "alignment", "DAG run", "validation",
    )  # fmt: skip
    return _table(head, body, "history")


def _overview(stats: JobStats, links: Links, now_ms: int | None) -> str:
    o = stats.overview
    cards = "".join(
        f'<div class="card" data-count="{k}"><span class="muted">{esc(text)}</span><b>{v}</b></div>'
        for k, text, v in (
            ("triggered", "triggered", o.triggered),
            ("in_progress", "in progress", o.in_progress + o.completing),
            ("completed", "completed", o.completed),
            ("failed", "failed", o.failed),
            ("restored", "restored", o.restored),
        )
    )

    def latest(text: str, r: CheckpointRow | None, extra: str) -> str:
        if r is None:
            return f"<tr><th>{esc(text)}</th><td colspan=3>none</td></tr>"
        when = r.end_ms or r.trigger_ms
        age = f" ({fmt_age(when, now_ms)})" if now_ms is not None else ""
        return (
            f"<tr><th>{esc(text)}</th><td>{_a(links.detail(r.checkpoint_id), f'#{r.checkpoint_id}')}</td>"
            f"<td>{esc(fmt_time(when) + age)}</td><td>{extra}</td></tr>"
        )

    rows = "".join(
        (
            latest(
                "latest completed",
                o.latest_completed,
                esc(fmt_bytes(o.latest_completed.state_size)) if o.latest_completed else "",
            ),
            latest("latest savepoint", o.latest_savepoint, ""),
            latest(
                "latest failure", o.latest_failure, esc(o.latest_failure.reason) if o.latest_failure else ""
            ),
            latest(
                "latest restore",
                o.latest_restore,
                _lineage(o.latest_restore, (), links) if o.latest_restore else "",
            ),
        )
    )
    return (
        f'<h2>Overview</h2><div class="cards">{cards}</div>'
        f'<table class="latest kv">{rows}</table>'
        f'<p class="muted">generation {o.generation}; highest checkpoint id {o.highest_id}; '
        f"{o.triggered} checkpoints in the history (retention removes old folders; their rows stay)</p>"
    )


def _summary(stats: JobStats) -> str:
    def row(text: str, s: SummaryStats, fmt: Callable[[float | None], str]) -> str:
        cells = "".join(
            f'<td class="n">{esc(fmt(getattr(s, k)))}</td>' for k in ("min", "avg", "p50", "p99", "max")
        )
        return f"<tr><th>{esc(text)}</th>{cells}<td class='n'>{s.count}</td></tr>"

    return "<h2>Summary (completed checkpoints)</h2>" + _table(
        ("", "min", "avg", "p50", "p99", "max", "count"),
        [
            row("end-to-end duration", stats.duration, fmt_duration),
            row("checkpointed size", stats.state_size, fmt_bytes),
            row("incremental size", stats.incremental_size, fmt_bytes),
        ],
        "summary",
    )


def _charts(stats: JobStats) -> str:
    done = [r for r in stats.rows if r.status == "completed"][-CHART_POINTS:]
    durations = [(r.checkpoint_id, float(r.duration_ms or 0)) for r in done]
    sizes = [(r.checkpoint_id, float(r.state_size)) for r in done]
    return (
        '<div class="charts">'
        + svg_chart("end-to-end duration", durations, fmt_duration)
        + svg_chart("checkpointed size", sizes, fmt_bytes)
        + "</div>"
    )


def _pager(stats: JobStats, offset: int, limit: int, status: str | None, links: Links) -> str:
    total = stats.count(status)
    if offset >= total > 0:  # past the end (a stale link after retention, a hand-edited offset)
        parts = [f"no checkpoints on this page: there are {total}"]
        back = max(0, (total - 1) // limit * limit)
        parts.append(_a(links.page(back, status), "newer") or "newer")
        return f'<p class="pager">{" · ".join(parts)}</p>'
    parts = [f"checkpoints {min(offset + 1, total)}-{min(offset + limit, total)} of {total}, newest first"]
    if offset > 0:
        parts.append(_a(links.page(max(0, offset - limit), status), "newer"))
    if offset + limit < total:
        parts.append(_a(links.page(offset + limit, status), "older"))
    return f'<p class="pager">{" · ".join(parts)}</p>'


def configuration_table(config: Mapping[str, Any]) -> str:
    """Readable values (durations, sizes, times, yes/no, ``k: v`` pairs), one row per key."""
    rows = "".join(
        f'<tr data-key="{esc(k)}"><th>{esc(label(k))}</th><td>{esc(fmt_value(k, v))}</td></tr>'
        for k, v in config.items()
    )
    return f'<table class="configuration kv">{rows}</table>'


def savepoints_table(savepoints: Sequence[SavepointInfo], links: Links, now_ms: int | None) -> str:
    if not savepoints:
        return (
            '<p class="muted">No savepoints: trigger the epochal_savepoint DAG (or `epochal savepoint`).</p>'
        )
    rows = []
    for s in savepoints:
        actions = " ".join(
            _a(links.action(kind, s), text, cls="button", attrs=f' data-action="{kind}"')
            for kind, text in (("restore", "restore from this"), ("backfill", "backfill from this"))
            if links.action(kind, s)
        )
        created = fmt_time(s.created_ms) + (
            f" ({fmt_age(s.created_ms, now_ms)})" if now_ms and s.created_ms else ""
        )
        source = _a(links.detail(s.checkpoint_id), f"#{s.checkpoint_id}") if s.checkpoint_id else "-"
        rows.append(
            f'<tr class="savepoint" data-name="{esc(s.name)}"><td>{esc(s.name)}</td><td>{esc(created)}</td>'
            f"<td>{source}</td><td>{esc(s.format)}</td><td><code>{esc(s.location)}</code>"
            + (f'<br><span class="error">{esc(s.error)}</span>' if s.error else "")
            + f"</td><td>{actions}</td></tr>"
        )
    return _table(
        ("name", "created (UTC)", "taken as checkpoint", "format", "location", ""), rows, "savepoints"
    )


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
    tab: str | None = None,
    savepoints: Sequence[SavepointInfo] | None = None,
    now_ms: int | None = None,
) -> str:
    """The Checkpoints page of one job. ``tab`` (one of :data:`TABS`) renders that tab under a tab bar
    (``nav.tabs``); None renders every section on one page (``epochal report``)."""
    links = links or Links()
    heading = title or f"Checkpoints of job {stats.job_id}"
    config = configuration if configuration is not None else stats.configuration
    sections: dict[str, Callable[[], str]] = {
        "overview": lambda: _overview(stats, links, now_ms) + "<h2>Charts</h2>" + _charts(stats),
        "history": lambda: (
            "<h2>History</h2>"
            + _pager(stats, offset, limit, status, links)
            + history_table(stats.page(offset=offset, limit=limit, status=status), links, savepoints or ())
        ),
        "summary": lambda: _summary(stats),
        "configuration": lambda: "<h2>Configuration</h2>" + configuration_table(config),
        "savepoints": lambda: "<h2>Savepoints</h2>" + savepoints_table(savepoints or (), links, now_ms),
    }
    if tab is None:
        shown = [k for k in TABS if k != "savepoints" or savepoints is not None]
        body = f"{nav}<h1>{esc(heading)}</h1>" + "".join(sections[k]() for k in shown)
        return page(heading, body)
    bar = "".join(
        _a(links.tab(k), k.capitalize(), cls="active" if k == tab else "", attrs=f' data-tab="{k}"')
        for k in TABS
    )
    body = f'{nav}<h1>{esc(heading)}</h1><nav class="tabs">{bar}</nav>' + sections[tab]()
    return page(heading, body)


def detail_page(
    detail: CheckpointDetail,
    *,
    links: Links | None = None,
    nav: str = "",
    savepoints: Sequence[SavepointInfo] = (),
) -> str:
    """One checkpoint: its history row, then per operator a table with one row per subtask
    (``table.subtasks``, ``tr.subtask``) and one column per metric any subtask reported."""
    links = links or Links()
    r = detail.row
    ops = []
    for op in detail.operators:
        metrics = sorted({k for s in op.subtasks for k in s.metrics})
        subs = []
        for s in op.subtasks:
            cells = "".join(
                f'<td class="n">{esc(fmt_value(k, s.metrics[k]) if k in s.metrics else "-")}</td>'
                for k in metrics
            )
            subs.append(
                f'<tr class="subtask"><td class="n">{s.subtask}</td><td>{badge(s.status)}</td>'
                f"<td class='n'>{s.attempt}</td><td class='n'>{esc(fmt_bytes(s.state_size))}</td>"
                f"<td class='n'>{esc(fmt_bytes(s.bytes_written))}</td><td class='n'>{s.files}</td>"
                f"{cells}<td>{esc(s.reason) or '-'}</td></tr>"
            )
        peaks = [int(s.metrics["peak_rss_bytes"]) for s in op.subtasks if s.metrics.get("peak_rss_bytes")]
        peak = f", peak memory {esc(fmt_bytes(max(peaks)))} (largest subtask)" if peaks else ""
        disk = [
            int(s.metrics["state_on_disk_bytes"]) for s in op.subtasks if "state_on_disk_bytes" in s.metrics
        ]
        if disk:
            peak += f", {esc(fmt_bytes(sum(disk)))} of state on local disk"
        ops.append(
            f'<h3 class="operator">{esc(op.uid)}</h3><p class="muted">{op.acked}/{len(op.subtasks)} '
            f"acknowledged, {esc(fmt_bytes(op.state_size))} checkpointed, "
            f"{esc(fmt_bytes(op.bytes_written))} written{peak}</p>"
            + _table(
                (
                    "subtask",
                    "status",
                    "attempt",
                    "state size",
                    "written",
                    "files",
                    *map(label, metrics),
                    "reason",
                ),
                subs,
                "subtasks",
            )
        )
    back = f'<nav class="crumbs">{_a(links.back, "back to the history")}</nav>' if links.back else ""
    heading = f"Checkpoint {r.checkpoint_id}"
    positions = {str(k): v for k, v in detail.positions.items()}
    body = (
        f"{nav}{back}<h1>{esc(heading)}</h1>"
        + history_table([r], links, savepoints)
        + f'<p class="muted">attempt {detail.attempt}; '
        + f"validation: {esc(r.validation_detail or r.validation)}</p>"
        + "<h2>Operators</h2>"
        + "".join(ops)
        + "<h2>Barrier positions</h2>"
        + configuration_table(positions)
    )
    return page(heading, body)
