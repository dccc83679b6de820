"""Progress of a running epoch and its summary afterwards (the runtime reports, the caller shows).

The port is :class:`ProgressReporter`: ``start`` with the epoch's stages and their totals, then
``advance`` (records read by a source stage, per chunk; subtasks done by a keyed stage) or ``set``
(Spark stages: tasks done, from the status tracker), then ``finish``. A caller makes its reporter
current for the epoch (:func:`reporting`); the runtime calls the module functions below, which are
a no-op when no reporter is current -- on a Spark executor, or in a library call.

Where the numbers come from::

    in process (executor local)   source_subtask: records_read(stage, rows) after every chunk
                                  executors:      subtask_done(stage) after every subtask
    on Spark                      a driver thread polls SparkContext.statusTracker() every
                                  ``poll_s``: tasks done / tasks per Spark stage (the hot path
                                  is untouched: executors have no reporter)

Invariants: reporting never raises into the epoch (a failing reporter is dropped with a warning)
and costs one lookup per chunk, never per record. Shown by :class:`RichReporter` (a live bar on a
terminal), :class:`LineReporter` (plain lines, at most one per ``interval_s`` per stage, for pipes
and Airflow's task log) -- and summarized by :func:`epoch_summary` after the epoch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StageTotal:
    """One stage of the epoch: its label, how much work it has and in what unit."""

    name: str
    total: int
    unit: str  # "records" | "subtasks" | "tasks"


class ProgressReporter(Protocol):
    """Receives an epoch's progress (module docstring). Called from the epoch's thread, and from
    the Spark poller thread: implementations must be thread-safe."""

    def start(self, label: str, stages: list[StageTotal]) -> None: ...

    def advance(self, stage: str, amount: int) -> None: ...

    def set(self, stage: str, done: int, total: int, unit: str) -> None: ...

    def finish(self) -> None: ...


_current: ProgressReporter | None = None
_lock = threading.Lock()


@contextlib.contextmanager
def reporting(reporter: ProgressReporter | None) -> Iterator[None]:
    """Make ``reporter`` current for the block (None: nothing is reported)."""
    global _current
    with _lock:
        previous, _current = _current, reporter
    try:
        yield
    finally:
        with _lock:
            _current = previous


def _call(what: Callable[[ProgressReporter], None]) -> None:
    global _current
    reporter = _current
    if reporter is None:
        return
    try:
        what(reporter)
    except Exception as exc:  # progress must never break an epoch
        log.warning("progress reporting switched off: %s", exc)
        _current = None


def source_stage_name(stage_index: int, uid: str) -> str:
    return f"stage {stage_index} source {uid}"


def keyed_stage_name(stage_index: int) -> str:
    return f"stage {stage_index} keyed"


def epoch_started(label: str, stages: list[StageTotal]) -> None:
    _call(lambda r: r.start(label, stages))


def records_read(stage_index: int, uid: str, rows: int) -> None:
    """A source subtask read ``rows`` more records (called per chunk)."""
    if _current is not None:
        _call(lambda r: r.advance(source_stage_name(stage_index, uid), rows))


def subtask_done(stage_index: int, keyed: bool) -> None:
    """A keyed subtask finished (source stages count records instead)."""
    if _current is not None and keyed:
        _call(lambda r: r.advance(keyed_stage_name(stage_index), 1))


def epoch_finished() -> None:
    _call(lambda r: r.finish())


def stage_totals(job: Any, pending: Any, parallelism: int) -> list[StageTotal]:
    """The epoch's stages with their totals: a source stage's records in the cut (the pending
    record's ranges), a keyed stage's subtasks."""
    from spark_jobs.runtime import plan as topo

    ranges = pending.barrier.ranges
    totals = []
    for stage in job.graph.stages():
        if stage.key is None:
            uid = stage.steps[0].uid or stage.source_spec.source.uid
            prefix = topo.position_key(uid, "")
            records = sum(end - start for key, (start, end) in ranges.items() if key.startswith(prefix))
            totals.append(StageTotal(source_stage_name(stage.index, uid), records, "records"))
        else:
            totals.append(StageTotal(keyed_stage_name(stage.index), parallelism, "subtasks"))
    return totals


@contextlib.contextmanager
def spark_status(spark: Any, poll_s: float = 1.0) -> Iterator[None]:
    """While the block runs, poll Spark's status tracker and report tasks done per active stage."""
    if _current is None or spark is None:
        yield
        return
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    open_stages: set[int] = set()  # seen active, not yet reported complete

    def poll_once() -> None:
        open_stages.update(tracker.getActiveStageIds())
        for stage_id in sorted(open_stages):
            info = tracker.getStageInfo(stage_id)
            if info is None:
                open_stages.discard(stage_id)
                continue
            _report_stage(info)
            if info.numCompletedTasks >= info.numTasks:
                open_stages.discard(stage_id)

    def poll() -> None:
        while not stop.wait(poll_s):
            poll_once()
        poll_once()  # the stages that finished since the last poll

    thread = threading.Thread(target=poll, name="epochal-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=poll_s + 1)


def _report_stage(info: Any) -> None:
    name, done, total = f"spark stage {info.stageId}", info.numCompletedTasks, info.numTasks
    _call(lambda r: r.set(name, done, total, "tasks"))


def spark_ui_url(spark: Any) -> str | None:
    """The Spark UI of the session (None: no Spark, or the UI is off)."""
    if spark is None:
        return None
    try:
        url = spark.sparkContext.uiWebUrl
    except Exception:  # a stopped context
        return None
    return str(url) if url else None


# -- reporters ---------------------------------------------------------------------------------


class LineReporter:
    """Plain lines through ``emit`` (print, or a logger's info): a stage's line when its count
    changed, at most every ``interval_s`` seconds, and always when it reaches its total."""

    def __init__(self, emit: Callable[[str], None], interval_s: float = 2.0) -> None:
        self.emit = emit
        self.interval_s = interval_s
        self.label = ""
        self.stages: dict[str, list[Any]] = {}  # name -> [done, total, unit, last_emit]
        self._lock = threading.Lock()

    def start(self, label: str, stages: list[StageTotal]) -> None:
        with self._lock:
            self.label = label
            self.stages = {s.name: [0, s.total, s.unit, 0.0] for s in stages}

    def advance(self, stage: str, amount: int) -> None:
        with self._lock:
            entry = self.stages.setdefault(stage, [0, 0, "records", 0.0])
            self._show(stage, entry, entry[0] + amount, entry[1])

    def set(self, stage: str, done: int, total: int, unit: str) -> None:
        with self._lock:
            entry = self.stages.setdefault(stage, [0, total, unit, 0.0])
            self._show(stage, entry, done, total)

    def _show(self, stage: str, entry: list[Any], done: int, total: int) -> None:
        changed = done != entry[0] or entry[3] == 0.0
        entry[0], entry[1] = done, total
        now = time.monotonic()
        if changed and ((total and done >= total) or now - entry[3] >= self.interval_s):
            entry[3] = now
            self.emit(f"{self.label}: {stage}: {done:,}/{total:,} {entry[2]}")

    def finish(self) -> None:
        pass


class RichReporter:
    """A live progress bar per stage on a terminal (``rich``), removed when the epoch ends."""

    def __init__(self, console: Any = None) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.tasks: dict[str, Any] = {}
        self.label = ""
        self._lock = threading.Lock()

    def _task(self, stage: str, total: int, unit: str) -> Any:
        if stage not in self.tasks:
            self.tasks[stage] = self.progress.add_task(
                f"{self.label} {stage}", total=total or None, unit=unit
            )
        return self.tasks[stage]

    def start(self, label: str, stages: list[StageTotal]) -> None:
        with self._lock:
            self.label = label
            self.progress.start()
            for s in stages:
                self._task(s.name, s.total, s.unit)

    def advance(self, stage: str, amount: int) -> None:
        with self._lock:
            self.progress.advance(self._task(stage, 0, "records"), amount)

    def set(self, stage: str, done: int, total: int, unit: str) -> None:
        with self._lock:
            self.progress.update(self._task(stage, total, unit), completed=done, total=total)

    def finish(self) -> None:
        with self._lock:
            self.progress.stop()
            for task in list(self.tasks.values()):
                self.progress.remove_task(task)
            self.tasks.clear()


# -- the summary -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EpochSummary:
    """What one epoch did. Sizes in bytes: ``state_bytes`` every state file the checkpoint
    references, ``incremental_bytes`` what this epoch uploaded, ``checkpoint_bytes`` the state
    plus the checkpoint's metadata document. ``duration_ms`` is measured (monotonic) by the
    caller; ``spark_ui`` is None when Spark did not run."""

    checkpoint_id: int | None
    status: str
    records_in: int
    records_out: int
    duration_ms: int
    state_bytes: int
    checkpoint_bytes: int
    incremental_bytes: int
    spark_ui: str | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        from state_store.core.trigger_checks import human_duration

        target = "no checkpoint" if self.checkpoint_id is None else f"checkpoint {self.checkpoint_id}"
        text = f"epoch -> {target}: {self.status}"
        if self.reason:
            text += f" {self.reason}"
        if self.checkpoint_id is None:
            return text
        text += (
            f" in {human_duration(self.duration_ms)}; "
            f"records in {self.records_in:,}, out {self.records_out:,}; "
            f"state {fmt_bytes(self.state_bytes)}, checkpoint {fmt_bytes(self.checkpoint_bytes)} "
            f"(this epoch uploaded {fmt_bytes(self.incremental_bytes)})"
        )
        return text + (f"; Spark UI {self.spark_ui}" if self.spark_ui else "")


def fmt_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def epoch_summary(
    store: Any,
    job_id: str,
    checkpoint_id: int | None,
    status: str,
    summaries: list[dict[str, Any]],
    duration_ms: int,
    *,
    spark_ui: str | None = None,
    reason: str = "",
) -> EpochSummary:
    """The summary of epoch ``checkpoint_id`` from the store: records in from its cut, sizes from
    its metadata once completed, else from the acks of its newest attempt; records out from the
    terminal stage's subtask summaries."""
    from state_store.core import documents
    from state_store.core.codec import ManifestError
    from state_store.core.history import checkpoint_summary, incremental_bytes
    from state_store.core.layout import JobLayout
    from state_store.core.manifests import AckRecord, PendingRecord

    records_out = sum(int(s.get("rows_out", 0)) for s in summaries if isinstance(s, dict))
    if checkpoint_id is None:
        return EpochSummary(None, status, 0, records_out, duration_ms, 0, 0, 0, spark_ui, reason)
    layout = JobLayout(job_id)
    try:
        pending = documents.read(store, layout.pending(checkpoint_id), PendingRecord)
        records_in = sum(end - start for start, end in pending.barrier.ranges.values())
        row = checkpoint_summary(store, job_id, checkpoint_id)
        if row is not None and row.status == "completed":
            state, incremental = row.state_bytes, row.incremental_bytes
            meta = store.head(layout.metadata(checkpoint_id))
            checkpoint = state + (meta.size if meta is not None else 0)
        else:
            acks = [
                documents.read(store, i.key, AckRecord) for i in store.list(layout.acks_prefix(checkpoint_id))
            ]
            newest = max((a.attempt for a in acks), default=0)
            mine = [a for a in acks if a.attempt == newest]
            state = sum(h.size for a in mine for h in a.handles)
            incremental = sum(
                int(a.metrics.get("bytes_written", 0))
                for a in mine
                if isinstance(a.metrics.get("bytes_written"), int)
            )
            checkpoint = state
    except (ManifestError, OSError) as exc:  # a summary never fails an epoch
        log.warning("epoch %s of %s: no sizes in its summary (%s)", checkpoint_id, job_id, exc)
        records_in, state, checkpoint, incremental = 0, 0, 0, 0
    _ = incremental_bytes  # (the history's definition of incremental bytes is the one used)
    return EpochSummary(
        checkpoint_id,
        status,
        records_in,
        records_out,
        duration_ms,
        state,
        checkpoint,
        incremental,
        spark_ui,
        reason,
    )


__all__ = [
    "EpochSummary",
    "LineReporter",
    "ProgressReporter",
    "RichReporter",
    "StageTotal",
    "epoch_finished",
    "epoch_started",
    "epoch_summary",
    "records_read",
    "reporting",
    "spark_status",
    "spark_ui_url",
    "stage_totals",
    "subtask_done",
]
