"""The restore plan as a fixed-width table for people (``epochal restore --dry-run``, the Airflow
restore operator's log, a rescale by definition).

Presentation only: it reads a :class:`~state_store.core.restore.RestorePlan` and decides nothing.
The table has a header (snapshot, target job, claim mode and its meaning, the plan's notes), one
line per row (uid, old uid, action with ``!`` when refused, parallelism ``old -> new``, states
``name`` restored / ``+name`` new / ``-name`` dropped, then its refusals, notes and at most
:data:`SUBTASK_LIMIT` subtask assignments, one a line), and a verdict: ``OK: <summary>`` or
``REFUSED (n): <summary>`` followed by every refusal.
"""

from __future__ import annotations

from state_store.core.restore import RestorePlan

SUBTASK_LIMIT = 16
"""Subtask assignments shown per row; the rest are counted (``--json`` has them all)."""


def render_plan(plan: RestorePlan) -> str:
    """A fixed-width table of ``plan`` (header, rows, refusals); see the module docstring."""
    lines = [
        f"Restore plan: {plan.snapshot.describe()} -> job {plan.job_id!r} "
        f"(max_parallelism {plan.max_parallelism})",
        f"Claim mode {plan.claim_mode}: {plan.claim_mode_meaning}",
        *(f"Note: {n}" for n in plan.notes),
        "",
    ]
    header = ("UID", "OLD UID", "ACTION", "PARALLELISM", "STATES", "NOTES")
    cells: list[tuple[tuple[str, ...], list[str]]] = []
    for row in plan.rows:
        action = row.action if row.ok else f"{row.action}!"
        states = ",".join(
            [*row.states, *(f"+{s}" for s in row.new_states), *(f"-{s}" for s in row.dropped_states)]
        )
        extra = [*row.refusals, *row.notes]
        extra += [str(s) for s in row.subtasks[:SUBTASK_LIMIT]]
        if len(row.subtasks) > SUBTASK_LIMIT:
            extra.append(f"... {len(row.subtasks) - SUBTASK_LIMIT} more subtasks (see --json)")
        par = f"{_dash(row.old_parallelism)} -> {_dash(row.new_parallelism)}"
        line = (row.uid, row.old_uid or "-", action, par, states or "-", extra[0] if extra else "")
        cells.append((line, extra[1:]))
    widths = [max([len(header[i]), *(len(c[0][i]) for c in cells)]) for i in range(len(header) - 1)]
    indent = sum(widths) + 2 * len(widths)

    def fmt(values: tuple[str, ...]) -> str:
        padded = [v.ljust(w) for v, w in zip(values[:-1], widths)]
        return "  ".join([*padded, values[-1]]).rstrip()

    lines.append(fmt(header))
    for first, more in cells:
        lines.append(fmt(first))
        lines.extend((" " * indent + m).rstrip() for m in more)
    if not plan.rows:
        lines.append("(no operators)")
    lines.append("")
    if plan.ok:
        lines.append("OK: " + plan.summary())
    else:
        lines.append(f"REFUSED ({len(plan.refusals)}): " + plan.summary())
        lines.extend(f"  - {r}" for r in plan.refusals)
    lines.append("States: name restored, +name starts empty, -name dropped; ACTION! = refused.")
    return "\n".join(lines)


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)
