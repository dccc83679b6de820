"""What the CLI prints: aligned text tables for people, JSON for programs (``--json``).

Tables never hide a value a script needs: every table has a ``--json`` twin with the raw numbers
(bytes, epoch milliseconds); the table shows them as sizes and UTC times. Times that no calendar
holds are shown raw, never fatal (old rows may carry them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from state_store.core import CheckpointSummary
from state_store.core.codec import to_jsonable
from state_store.core.status import CheckpointStatus

LATEST = "LATEST"


def fmt_ms(ms: int | None) -> str:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MM:SS`` (UTC); ``-`` for None."""
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a time no calendar holds: show it, never die
        return f"{ms} ms"


def fmt_bytes(n: int | None) -> str:
    """``812 B``, ``731.6 KiB``, ``1.2 MiB`` ...; ``-`` for None."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_duration(ms: int | float | None) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 05 s``; ``-`` for None (still running, or no true duration)."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{int(ms)} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(int(ms // 1000), 60)
    return f"{minutes} min {seconds:02d} s"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = ()) -> str:
    """An aligned text table: a header, a rule, one line per row (columns in ``right`` are
    right-aligned, numbers by convention). Trailing blanks are stripped."""
    body = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]
    right = set(right)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    header = line(headers)
    return "\n".join([header, "-" * len(header), *(line(r) for r in body)])


def dumps(value: Any) -> str:
    """JSON for stdout: dataclasses and enums as the codec writes them, one document."""
    return json.dumps(to_jsonable(value), indent=1, default=_plain)


def _plain(value: Any) -> Any:
    """numpy scalars as numbers, anything else JSON does not know (timestamps, decimals) as text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


@dataclass(frozen=True, slots=True)
class HistoryLine:
    """One line of ``epochal checkpoints list``: a checkpoint still in storage
    (:class:`~state_store.core.CheckpointSummary`) or one from the history archive the Checkpoints
    view shows (:class:`~state_store.monitoring.model.CheckpointRow`), in the same words."""

    checkpoint_id: int
    status: str
    trigger_ms: int
    duration_ms: int | None
    acked: int
    expected: int
    state_bytes: int
    savepoint: bool
    reason: str
    restored_from: str
    latest: bool
    retained: bool = True

    @property
    def note(self) -> str:
        words = [LATEST] if self.latest else []
        words += ["savepoint"] if self.savepoint else []
        words += [f"restored from {self.restored_from}"] if self.restored_from else []
        words += [] if self.retained else ["deleted by retention"]
        words += [self.reason] if self.reason else []
        return "; ".join(words)


def summary_line(row: CheckpointSummary, latest: int | None) -> HistoryLine:
    return HistoryLine(
        checkpoint_id=row.checkpoint_id,
        status=CheckpointStatus(row.status).label(),
        trigger_ms=row.trigger_ms,
        duration_ms=row.duration_ms,
        acked=row.acked,
        expected=row.expected,
        state_bytes=row.state_bytes,
        savepoint=row.savepoint,
        reason=row.reason,
        restored_from=row.restored_from,
        latest=row.checkpoint_id == latest,
    )


def format_lines(lines: Sequence[HistoryLine]) -> str:
    """The history table, oldest first (the newest line is next to the prompt)."""
    if not lines:
        return "no checkpoints yet"
    return table(
        ["id", "status", "triggered (UTC)", "duration", "acks", "state size", "note"],
        (
            [
                line.checkpoint_id,
                line.status,
                fmt_ms(line.trigger_ms),
                fmt_duration(line.duration_ms),
                f"{line.acked}/{line.expected}",
                fmt_bytes(line.state_bytes),
                line.note,
            ]
            for line in lines
        ),
        right=(0, 3, 4, 5),
    )


def format_history(rows: Sequence[CheckpointSummary], latest: int | None = None) -> str:
    """The table of :func:`~state_store.core.checkpoint_history` rows; ``latest`` is marked."""
    return format_lines([summary_line(r, latest) for r in rows])
