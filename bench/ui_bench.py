"""Checkpoints view with 10,000 checkpoints in history: is the first page fast?

Generates ``N`` checkpoints of one job in a local store with the protocol's own records and codec
(``PendingRecord`` -> ``AttemptRecord`` -> ``AckRecord`` per task -> ``DecisionRecord`` ->
``PendingCheckpoint.finalize`` -> ``CompletedMetadata``; every 20th checkpoint aborted, the newest one
in flight). It skips the coordinator's per-trigger listing (quadratic in history length) and the
state files themselves (statistics never open them), and writes without fsync. Then it measures,
through the real FastAPI app (Airflow's auth dependency with a test user), the first history page
(HTML and JSON) cold (new service: full scan), re-listed with unchanged storage, served from the
cache, and after one checkpoint completed and one triggered (re-list, read only those two).

Then the history archive (``state_store.monitoring.archive``): the archive writer runs once over the
10,000 folders, and a *new* service (fresh ``CheckpointStats``, no warm cache) serves the first page
(a) with all folders still there and (b) after real retention (``apply_retention``, 10 retained) deleted
all but the newest folders -- the state a job with 10,000 checkpoints in its history is normally in.

Run: ``PYTHONPATH=.:plugins .venv/bin/python bench/ui_bench.py [--checkpoints 10000] [--store DIR]``;
writes ``bench/results/ui.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from state_store.core import documents
from state_store.core.failures import CheckpointFailureReason
from state_store.core.layout import JobLayout
from state_store.core.manifests import (
    AckRecord,
    AttemptRecord,
    DecisionRecord,
    Outcome,
    PendingRecord,
    StateHandle,
    TaskId,
)
from state_store.core.pending import PendingCheckpoint
from state_store.core.properties import CheckpointProperties
from state_store.storage import LocalObjectStore, open_store

JOB = "bench-ui"
TASKS = (TaskId("counts", 0), TaskId("counts", 1), TaskId("out", 0))
START_MS = 1_700_000_000_000


def write_checkpoint(store, layout: JobLayout, n: int, *, fail: bool, pending_only: bool) -> None:
    trigger = START_MS + n * 10_000
    pending = PendingRecord(
        n, JOB, 1, "bench", trigger, trigger + 600_000, CheckpointProperties.checkpoint(), TASKS,
        positions={"ranges": {"updates/p0": [n * 100, n * 100 + 100]}, "base": n - 1 or None},
        request_id=f"scheduled__{datetime.fromtimestamp(trigger / 1000, tz=UTC).isoformat()}",
    )  # fmt: skip
    documents.create(store, layout.pending(n), pending)
    if pending_only:
        return
    documents.create(store, layout.attempt(n, 1), AttemptRecord(n, 1, 1, trigger + 5, "bench"))
    checkpoint = PendingCheckpoint(pending, 1)
    for task in TASKS:
        size = 4096 + (n * 37 + task.subtask * 101) % 2048
        handle = StateHandle(
            layout.state_file(n, task.uid, task.subtask, task.subtask, "arrow"), size, "blake3:" + "0" * 64
        )
        ack = AckRecord(n, task, 1, 1, (handle,), metrics={"bytes_written": size, "alignment_ms": n % 13})
        documents.create(store, layout.ack(n, task.uid, task.subtask, 1, 1), ack)
        checkpoint.acknowledge(ack)
    end = trigger + 200 + (n * 7919) % 900
    if fail:
        decision = DecisionRecord(
            n, Outcome.ABORT, end, reason=CheckpointFailureReason.CHECKPOINT_DECLINED.name, message="bench"
        )
        documents.create(store, layout.decision(n), decision)
        return
    documents.create(store, layout.decision(n), DecisionRecord(n, Outcome.COMPLETE, end, attempt=1))
    documents.create(store, layout.metadata(n), checkpoint.finalize(end))


def generate(root: Path, count: int) -> str:
    uri = f"file://{root}"
    store = LocalObjectStore(root, fsync=False)  # same files as open_store(uri), without an fsync each
    layout = JobLayout(JOB)
    have = {
        layout.checkpoint_id_of(i.key)
        for i in store.list(layout.checkpoints_prefix)
        if i.key.endswith("_pending.json")
    }
    for n in range(1, count + 1):
        if n not in have:
            write_checkpoint(store, layout, n, fail=n % 20 == 0, pending_only=n == count)
    return uri


def timed(fn, repeat: int = 1) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        if getattr(result, "status_code", 200) != 200:
            raise SystemExit(f"request failed: {result.status_code} {result.text[:300]}")  # type: ignore[attr-defined]
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), result


def archive_bench(uri: str, n: int, client: Any) -> list[tuple[str, float, str]]:
    """The archive rows of the report (mutates the store: retention deletes all but 10 folders)."""
    from state_store.core.cleaner import apply_retention
    from state_store.core.config import CheckpointConfig
    from state_store.monitoring.archive import archive_history, load_archive

    store, layout = open_store(uri), JobLayout(JOB)
    rows: list[tuple[str, float, str]] = []
    ms, report = timed(lambda: archive_history(store, JOB))
    rows.append(
        (
            f"archive writer, first run over {n:,} folders (one-off)",
            ms,
            f"{report.rows:,} rows in {len(report.written)} segments, {report.documents_read:,} reads",
        )
    )
    ms, view = timed(lambda: load_archive(store, layout))
    rows.append(("read the whole archive (list + decode every segment)", ms, f"{len(view.rows):,} rows"))

    def first_page(label: str, max_age_ms: int, full_relist_ms: int) -> None:
        app = client(max_age_ms, full_relist_ms)
        ms, r = timed(lambda: app.get(f"/checkpoints/{JOB}"))
        total = app.get(f"/api/jobs/{JOB}/checkpoints?limit=50").json()["total"]
        rows.append((label, ms, f"{len(r.content):,} bytes, total {total:,}"))

    first_page(
        f"HTML first page, cold, plugin settings ({n:,} folders live; lists recent/new folders only)",
        2000,
        300_000,
    )
    first_page(
        f"HTML first page, cold, full listing ({n:,} folders live; rows from the archive, 0 reads)", 0, 0
    )
    config = CheckpointConfig(retained_checkpoints=10, orphan_grace_ms=0)
    ms, plan = timed(lambda: apply_retention(store, JOB, config, _Clock()))
    rows.append(
        (
            "retention (10 retained, grace 0): deletes the old folders",
            ms,
            f"{len(plan.discarded):,} checkpoints, {len(plan.delete):,} files",
        )
    )
    live = len({layout.checkpoint_id_of(i.key) for i in store.list(layout.checkpoints_prefix)})
    first_page(
        f"HTML first page, cold, plugin settings, after retention ({live} folders live)", 2000, 300_000
    )
    first_page(f"HTML first page, cold, full listing, after retention ({live} folders live)", 0, 0)
    app = client(0, 0)
    ms, r = timed(lambda: app.get(f"/api/jobs/{JOB}/checkpoints?limit=50"))
    rows.append(("JSON first page, cold, full listing, after retention", ms, f"total {r.json()['total']:,}"))
    # one more cycle's worth: the in-flight checkpoint completes, the writer archives it
    for info in list(store.list(layout.checkpoint_dir(n))):
        store.delete(info.key)
    write_checkpoint(store, layout, n, fail=False, pending_only=False)
    ms, report = timed(lambda: archive_history(store, JOB))
    rows.append(("archive writer in a cycle (1 new row; reads every segment)", ms, f"{report.rows} row"))
    return rows


def cold_only(uri: str, repeat: int = 3) -> int:
    """Cold first pages (a new app and ``CheckpointStats`` each time) of the job in an existing store."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api import security
    from epochal_airflow.ui.app import JobDirectory, create_app
    from fastapi.testclient import TestClient

    from state_store.monitoring.archive import load_archive

    store, layout = open_store(uri), JobLayout(JOB)
    live = len({layout.checkpoint_id_of(i.key) for i in store.list(layout.checkpoints_prefix)})
    rows: list[tuple[str, float, str]] = []
    ms, view = timed(lambda: load_archive(store, layout), repeat)
    rows.append(("read the whole archive (list + decode every segment)", ms, f"{len(view.rows):,} rows"))
    for label, max_age_ms, full_relist_ms, path in (
        ("HTML first page, cold, plugin settings", 2000, 300_000, f"/checkpoints/{JOB}"),
        ("HTML first page, cold, full listing", 0, 0, f"/checkpoints/{JOB}"),
        ("JSON first page, cold, plugin settings", 2000, 300_000, f"/api/jobs/{JOB}/checkpoints?limit=50"),
    ):
        times = []
        for _ in range(repeat):
            app = create_app(
                lambda: open_store(uri),
                JobDirectory(extra_ids=(JOB,)),
                max_age_ms=max_age_ms,
                full_relist_ms=full_relist_ms,
            )
            app.dependency_overrides[security.get_user] = lambda: SimpleAuthManagerUser(
                username="b", role="admin"
            )
            ms, r = timed(lambda app=app, path=path: TestClient(app).get(path))
            times.append(ms)
        rows.append((f"{label} ({live} folders live)", statistics.median(times), f"{len(r.content):,} bytes"))
    print(f"load average {os.getloadavg()[0]:.1f}; median of {repeat} cold starts")
    print("\n".join(f"| {name} | {ms:,.0f} | {note} |" for name, ms, note in rows))
    return 0


class _Clock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoints", type=int, default=10_000)
    parser.add_argument("--store", default=None, help="directory to reuse (default: a new temp dir)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "ui.md"))
    parser.add_argument(
        "--cold-only",
        action="store_true",
        help="only measure cold first pages of the job already in --store (e.g. after a full run); print",
    )
    args = parser.parse_args(argv)
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api import security
    from epochal_airflow.ui.app import JobDirectory, create_app
    from fastapi.testclient import TestClient

    root = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="epochal-ui-bench-"))
    if args.cold_only:
        return cold_only(f"file://{root}")
    root.mkdir(parents=True, exist_ok=True)
    for info in list(LocalObjectStore(root).list(JobLayout(JOB).history_prefix)):  # a reused store
        LocalObjectStore(root).delete(info.key)
    gen_ms, uri = timed(lambda: generate(root, args.checkpoints))
    files = sum(1 for _ in root.rglob("*.json"))

    def client(max_age_ms: int, full_relist_ms: int = 30_000) -> TestClient:
        app = create_app(
            lambda: open_store(uri),
            JobDirectory(extra_ids=(JOB,)),
            max_age_ms=max_age_ms,
            full_relist_ms=full_relist_ms,
        )
        app.dependency_overrides[security.get_user] = lambda: SimpleAuthManagerUser(
            username="b", role="admin"
        )
        return TestClient(app)

    def newest(response: Any) -> str:
        return response.text.split('data-id="')[1].split('"')[0]

    rows: list[tuple[str, float, str]] = []
    full = client(0, 0)
    ms, r = timed(lambda: full.get(f"/checkpoints/{JOB}"))
    rows.append(
        (
            "HTML first page, cold (new service: full listing, every document read)",
            ms,
            f"{len(r.content):,} bytes",
        )
    )
    ms, r = timed(lambda: full.get(f"/checkpoints/{JOB}"))
    rows.append(("HTML first page, full re-listing per request (nothing changed: rows reused)", ms, ""))
    cold = client(0, 3_600_000)  # incremental from now on (the plugin: a full listing every 5 min)
    cold.get(f"/checkpoints/{JOB}")
    ms, r = timed(lambda: cold.get(f"/checkpoints/{JOB}"), 5)
    rows.append(("HTML first page, incremental re-listing per request (what a refresh costs)", ms, ""))
    ms, r = timed(lambda: cold.get(f"/api/jobs/{JOB}/checkpoints?limit=50"), 5)
    rows.append(("JSON first page, incremental re-listing per request", ms, f"total {r.json()['total']}"))
    ms, r = timed(lambda: cold.get(f"/checkpoints/{JOB}?offset=9000&limit=50"), 5)
    rows.append(("HTML page at offset 9000, incremental re-listing per request", ms, ""))
    ms, r = timed(lambda: cold.get(f"/api/jobs/{JOB}/checkpoints/{args.checkpoints - 1}"), 5)
    rows.append(("JSON checkpoint detail (lists and reads one folder)", ms, ""))
    aged = client(2000)
    aged.get(f"/checkpoints/{JOB}")
    ms, r = timed(lambda: aged.get(f"/checkpoints/{JOB}"), 5)
    rows.append(("HTML first page as the plugin serves it (max_age 2 s, refresh in background)", ms, ""))
    store, layout = open_store(uri), JobLayout(JOB)
    n = args.checkpoints
    # finish the in-flight checkpoint (its acks, decision, metadata) and trigger one more
    for info in list(store.list(layout.checkpoint_dir(n))):
        store.delete(info.key)
    write_checkpoint(store, layout, n, fail=False, pending_only=False)
    write_checkpoint(store, layout, n + 1, fail=False, pending_only=True)
    ms, r = timed(lambda: cold.get(f"/checkpoints/{JOB}"))
    rows.append(
        ("HTML first page after 1 completed + 1 triggered (incremental, reads 2)", ms, f"newest {newest(r)}")
    )
    for info in list(store.list(layout.checkpoint_dir(n + 1))):
        store.delete(info.key)
    for info in list(store.list(layout.checkpoint_dir(n))):
        store.delete(info.key)
    write_checkpoint(store, layout, n, fail=False, pending_only=True)
    archive_rows = archive_bench(uri, n, client)
    lines = [
        "# Checkpoints view with many checkpoints (`bench/ui_bench.py`)",
        "",
        f"{args.checkpoints:,} checkpoints of one job in a local store ({files:,} JSON documents; every 20th "
        "aborted, the newest in flight; 3 acks each), generated with the protocol's records and codec in "
        f"{gen_ms / 1000:.1f} s. Requests go through the real FastAPI app in process (TestClient); "
        "50 rows per page. Warm numbers are the median of 5.",
        "",
        f"Machine: 2 cores shared with other work (load average {os.getloadavg()[0]:.1f} at the end), "
        f"Python {platform.python_version()}, {platform.platform()}; "
        f"{datetime.now(tz=UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        "| request | ms | result |",
        "|---|---:|---|",
        *(f"| {name} | {ms:,.0f} | {note} |" for name, ms, note in rows),
        "",
        "Every response was HTTP 200. The plugin serves with ``max_age_ms=2000, full_relist_ms=300000``: a "
        "page load returns the cached statistics; when they are older than 2 s a background thread "
        "refreshes them (incremental re-listing: undecided and the 32 newest folders plus new ids; a full "
        "listing every 5 minutes picks up retention's deletions); only new or changed checkpoints are "
        "read again. "
        "The cold first load after a server start is a full listing of the job root plus a read of every "
        "checkpoint's documents.",
        "",
        "## With the checkpoint history archive (cold start: a new service, no warm cache)",
        "",
        "The archive writer (`archive_history`, run by the epoch cycle before retention) stores the rows "
        "of decided checkpoints in `<job>/history/` segments of up to 1,000 rows. Here it runs once over "
        "the 10,000 folders above (one-off cost; a cycle normally archives one new row). Each cold row "
        "below is a new FastAPI app with a new `CheckpointStats`, so nothing is cached in memory.",
        "",
        "| request / step | ms | result |",
        "|---|---:|---|",
        *(f"| {name} | {ms:,.0f} | {note} |" for name, ms, note in archive_rows),
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
