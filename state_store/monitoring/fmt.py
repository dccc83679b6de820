"""Human-readable values for the Checkpoints view: times, ages, durations, sizes, configuration.

Every function accepts None (shown as ``-``) and never raises on a value from storage: a number no
calendar holds or a type it does not expect is shown as it is. Durations and sizes are humanized the
way Flink's web UI shows them (``850 ms``, ``12.3 s``, ``4 min 05 s``, ``1.2 MiB``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from state_store.core.trigger_checks import human_duration

_TIMESTAMP_KEYS = ("created_ms", "trigger_ms", "end_ms", "completed_ms", "modified_ms", "until_ms")


def fmt_time(ms: int | None) -> str:
    """A wall-clock time in UTC (``2026-11-26 06:44:18``)."""
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError, TypeError):  # a time no calendar holds: show it, never die
        return f"{ms} ms"


def fmt_duration(ms: float | None) -> str:
    """``human_duration`` of the core (``850 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``,
    ``3 d 04 h``: the same text as the CLI's refusals); a negative value from storage is shown with
    its sign instead of raising."""
    if ms is None:
        return "-"
    if ms < 0:
        return f"-{human_duration(-ms)}"
    return human_duration(ms)


def fmt_age(ms: int | None, now_ms: int) -> str:
    """How long ago ``ms`` was (``3 min 5 s ago``; ``in the future`` for a clock ahead of ``now``)."""
    if ms is None:
        return "-"
    if ms > now_ms + 1000:
        return f"{fmt_duration(ms - now_ms)} in the future"
    return f"{fmt_duration(max(0, now_ms - ms))} ago"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover (the loop returns at GiB)


def fmt_value(key: str, value: Any) -> str:
    """A configuration or metric value by the convention of its key: ``*_ms`` timestamps and
    durations, ``*size*``/``*bytes*`` sizes, booleans as yes/no, dicts as ``k: v`` pairs, lists joined."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {fmt_value(str(k), v)}" for k, v in value.items()) or "(none)"
    if isinstance(value, list | tuple):
        return ", ".join(fmt_value(key, v) for v in value) or "(none)"
    name = key.rsplit(".", 1)[-1]
    if isinstance(value, int | float):
        if name in _TIMESTAMP_KEYS:
            return fmt_time(int(value))
        if name.endswith("_ms"):
            return fmt_duration(value)
        if "bytes" in name or name.endswith("size") or name.endswith("_size"):
            return fmt_bytes(value)
        return f"{value:,}" if isinstance(value, int) else f"{value:,.3f}".rstrip("0").rstrip(".")
    return str(value)


def label(key: str) -> str:
    """``max_concurrent_checkpoints`` -> ``max concurrent checkpoints`` (``declared.`` kept as a prefix)."""
    return key.replace("_", " ")
