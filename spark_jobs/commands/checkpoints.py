"""``epochal checkpoints list|show|diff``: the history, one checkpoint, and the state between two.

``list`` shows the checkpoints still in storage (the retained ones, plus any in flight or failed
since the last retention); ``--all`` the full history from the job's history archive, the rows the
Checkpoints view in Airflow shows (``state_store.monitoring``). ``LATEST`` marks the checkpoint the
next epoch continues from. ``show`` prints a summary (``--json``: the whole ``_metadata.json``).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import asdict
from typing import Any

from spark_jobs.commands import render
from spark_jobs.commands.common import job_store, latest_id, snapshot_of
from spark_jobs.commands.errors import UsageError
from spark_jobs.commands.render import HistoryLine
from state_store.core import ObjectNotFound, checkpoint_history, load_completed
from state_store.core.history import incremental_bytes
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata


def cmd_list(args: argparse.Namespace) -> int:
    store = job_store(args)
    latest = latest_id(store, args.job)
    if args.all:
        return _list_all(store, args, latest)
    rows = checkpoint_history(store, args.job)
    if args.json:
        print(render.dumps([{**asdict(r), "latest": r.checkpoint_id == latest} for r in rows]))
    else:
        print(render.format_history(rows, latest))
    return 0


def _list_all(store: Any, args: argparse.Namespace, latest: int | None) -> int:
    from state_store.monitoring.reader import CheckpointStats

    rows = CheckpointStats(store, max_age_ms=0, workers=4).stats(args.job, wait=True).rows
    present = {r.checkpoint_id for r in checkpoint_history(store, args.job)}
    if args.json:
        print(
            render.dumps(
                [
                    {
                        **r.to_json(),
                        "latest": r.checkpoint_id == latest,
                        "retained": r.checkpoint_id in present,
                    }
                    for r in rows
                ]
            )
        )
        return 0
    lines = [
        HistoryLine(
            checkpoint_id=r.checkpoint_id,
            status=r.status,
            trigger_ms=r.trigger_ms,
            duration_ms=r.duration_ms,
            acked=r.acked,
            expected=r.expected,
            state_bytes=r.state_size,
            savepoint=r.savepoint,
            reason=r.reason,
            restored_from=r.restored_from,
            latest=r.checkpoint_id == latest,
            retained=r.checkpoint_id in present,
        )
        for r in rows
    ]
    print(render.format_lines(lines))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    if args.id is not None and args.checkpoint is not None and args.id != args.checkpoint:
        raise UsageError(f"checkpoints show got two ids ({args.checkpoint} and --id {args.id}): give one")
    store = job_store(args)
    latest = latest_id(store, args.job)
    wanted = args.id if args.id is not None else args.checkpoint
    if wanted is None:
        if latest is None:
            raise UsageError(
                f"job {args.job} has no completed checkpoint yet: run an epoch first, or give an id "
                "from `epochal checkpoints list`"
            )
        wanted = latest
    if wanted < 1:
        raise UsageError(f"checkpoint id {wanted} is invalid: use an id from `epochal checkpoints list`")
    try:
        cp = load_completed(store, JobLayout(args.job), wanted, deep=True)
    except ObjectNotFound:
        raise UsageError(
            f"checkpoint {wanted} of job {args.job} was not found (not completed, or removed by "
            "retention): see `epochal checkpoints list`"
        ) from None
    if args.json:
        print(render.dumps(cp.metadata))
    else:
        print(describe(cp.metadata, latest=wanted == latest))
    return 0


def describe(meta: CompletedMetadata, *, latest: bool) -> str:
    """A completed checkpoint for people: header, one line per operator, the input cut."""
    layout = JobLayout(meta.job_id)
    barrier = meta.barrier
    kind = "savepoint" if meta.properties.savepoint else "checkpoint"
    if barrier.is_import:
        kind = f"restore of {barrier.restored_from}"
    uploaded = sum(incremental_bytes(layout, t) for t in meta.tasks)
    records = sum(end - start for start, end in barrier.ranges.values())
    duration = meta.completed_ms - meta.trigger_ms if meta.completed_ms >= meta.trigger_ms else None
    head = [
        f"checkpoint {meta.checkpoint_id} of job {meta.job_id}: completed{' (LATEST)' if latest else ''}",
        f"  kind        {kind}",
        f"  generation  {meta.generation}",
        f"  base        {barrier.base if barrier.base else '- (full: continues no checkpoint)'}",
        f"  triggered   {render.fmt_ms(meta.trigger_ms)} UTC",
        f"  completed   {render.fmt_ms(meta.completed_ms)} UTC ({render.fmt_duration(duration)})",
        f"  state       {render.fmt_bytes(meta.state_size)} in {len(meta.handles)} files "
        f"({render.fmt_bytes(uploaded)} uploaded by this checkpoint)",
        f"  input       {records} records from {len(barrier.ranges)} source partition"
        + ("" if len(barrier.ranges) == 1 else "s"),
    ]
    return "\n".join(
        [
            *head,
            "",
            _operators(meta, layout),
            *(["", _sources(meta)] if barrier.ranges else []),
            "",
            "full metadata (state files, checksums, timers, sink transactions): add --json",
        ]
    )


def _operators(meta: CompletedMetadata, layout: JobLayout) -> str:
    by_uid: dict[str, list[Any]] = defaultdict(list)
    for task in meta.tasks:
        by_uid[task.task.uid].append(task)
    rows = []
    for uid, tasks in sorted(by_uid.items()):
        parts = [t.parts for t in tasks]
        kind = (
            "source"
            if any(p.is_source for p in parts)
            else "sink"
            if any(p.is_sink for p in parts)
            else "state"
        )
        counted = sum(int(t.metrics.get("rows" if kind == "sink" else "records", 0) or 0) for t in tasks)
        rows.append(
            [
                uid,
                kind,
                len(tasks),
                sum(len(t.handles) for t in tasks),
                render.fmt_bytes(sum(h.size for t in tasks for h in t.handles)),
                render.fmt_bytes(sum(incremental_bytes(layout, t) for t in tasks)),
                f"{counted} {'rows out' if kind == 'sink' else 'read'}" if kind != "state" else "",
                _peak_memory(tasks),
                _note(tasks),
            ]
        )
    return render.table(
        ["operator", "kind", "subtasks", "files", "state size", "uploaded", "records", "peak memory", "note"],
        rows,
        right=(2, 3, 4, 5, 7),
    )


def _peak_memory(tasks: list[Any]) -> str:
    """The largest peak resident set any subtask of the operator reported (``-``: acks written
    before subtasks measured it)."""
    peaks = [int(t.metrics["peak_rss_bytes"]) for t in tasks if t.metrics.get("peak_rss_bytes")]
    return render.fmt_bytes(max(peaks)) if peaks else "-"


def _note(tasks: list[Any]) -> str:
    """What an operator's acks flag: the heap backend (the slow path) and why; state kept on local
    disk (``state_memory_mb``: its size over the subtasks, the largest store peak) or in memory
    although ``state_memory_mb`` is set."""
    notes = []
    reasons = sorted({str(t.metrics["heap_fallback"]) for t in tasks if t.metrics.get("heap_fallback")})
    if reasons:
        notes.append(f"heap backend (slow path): {reasons[0]}")
    disk = [int(t.metrics["state_on_disk_bytes"]) for t in tasks if "state_on_disk_bytes" in t.metrics]
    if disk:
        peak = max(int(t.metrics.get("state_memory_peak_bytes", 0)) for t in tasks)
        notes.append(
            f"state on local disk {render.fmt_bytes(sum(disk))}, store peak {render.fmt_bytes(peak)}"
        )
    if any(t.metrics.get("state_in_memory") for t in tasks):
        notes.append("state in memory (state_memory_mb covers batch process functions)")
    return "; ".join(notes)


def _sources(meta: CompletedMetadata) -> str:
    max_ts: dict[str, int | None] = {}
    for task in meta.tasks:
        source = task.parts.source
        if source is not None:
            max_ts[f"{task.task.uid}/{source.partition}"] = source.max_ts
    rows = [
        [key, start, end, end - start, render.fmt_ms(max_ts.get(key))]
        for key, (start, end) in sorted(meta.barrier.ranges.items())
    ]
    return render.table(
        ["source partition", "from offset", "to offset", "records", "max event time (UTC)"],
        rows,
        right=(1, 2, 3),
    )


def cmd_diff(args: argparse.Namespace) -> int:
    from spark_jobs.tools.inspect import diff

    result = diff(snapshot_of(args, args.a), snapshot_of(args, args.b))
    if args.json:
        print(render.dumps(result))
    else:
        print(f"state entries from {args.a} to {args.b}:")
        print(
            render.table(
                ["operator", "added", "removed", "changed"],
                ([uid, row["added"], row["removed"], row["changed"]] for uid, row in result.items()),
                right=(1, 2, 3),
            )
        )
    return 0
