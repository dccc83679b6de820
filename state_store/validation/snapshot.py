"""The built-in snapshot suite: is this checkpoint's state safe to publish and to restore from?

The caller flattens a checkpoint (or savepoint) into pandas frames; this module does not read state
files itself, so it works on any snapshot source (native Arrow files, canonical Parquet, a test).

State frame: one row per state entry (columns in :data:`STATE_COLUMNS`, extra columns allowed)
-------------------------------------------------------------------------------------------------
==================  ======  ==============================================================================
``operator``        str     operator uid
``key_group``       int     key group the row is stored under (the file's / the row's key group)
``state``           str     state name (descriptor name)
``kind``            str     state kind: ``value``, ``list``, ``map``, ``reducing`` or ``aggregating``
                            (``StateKind`` values; the state file's ``epochal.state_kinds`` metadata)
``key``             str     tagged JSON of the key, exactly as in the state file (``"u1"``, ``7``,
                            ``{"tuple":["a",1]}``); ``null`` (JSON) or a missing value = a null key
``namespace``       str     tagged JSON of the namespace (``null`` when not windowed)
``key_hash_group``  int     the key group RECOMPUTED by the caller from the decoded key:
                            ``state_store.core.keygroups.key_group_of(key, max_parallelism)``
==================  ======  ==============================================================================

List state has one row per element and map state one row per entry, so a key legitimately repeats
there; value, reducing and aggregating states hold one value per (key, namespace). The uniqueness
check therefore only looks at rows whose ``kind`` is single-valued (:data:`SINGLE_VALUED_KINDS`) --
pass every row, with its kind, and the suite selects them (a GX row condition on ``kind``).
Extra columns (for example ``value`` decoded from JSON, ``expiry_ms``) are ignored by the built-in
checks and visible to user expectations.

Timers frame (optional): one row per registered timer (columns :data:`TIMER_COLUMNS`)
-------------------------------------------------------------------------------------
``operator``, ``key_group``, ``key``, ``namespace`` as above and ``timestamp`` (int, ms); optional
``domain`` (``event_time`` / ``processing_time``; absent = every row is an event-time timer) and
optional ``key_hash_group`` (then timer key groups are checked too).

Checks (names are stable; the gate and the CLI refer to them)
-------------------------------------------------------------
* ``keys_not_null`` -- no missing key and no JSON ``null`` key (Flink refuses null keys).
* ``state_kinds_known`` -- every ``kind`` is a known state kind.
* ``keys_unique`` -- (operator, state, namespace, key) unique among single-valued rows.
* ``key_groups_in_range`` -- ``0 <= key_group < max_parallelism``.
* ``key_groups_correct`` -- ``key_group == key_hash_group``: a key stored under another group would be
  restored into the wrong subtask (or silently dropped by a rescaled restore).
* ``timer_key_groups_correct`` -- same for timers (only if the timers frame has ``key_hash_group``).
* ``timers_not_behind_watermark`` -- every event-time timer has ``timestamp > watermark``: the timer
  service fires a timer when the watermark reaches it, so a pending timer at or behind the watermark
  should already have fired (only if ``timers`` and ``watermark`` are given). Trap: a timer
  *registered* at or below the current watermark (a late record inside a window's allowed lateness,
  a process function registering in the past) legitimately waits for the next watermark advance.
  For such operators pass a per-operator ``watermark`` mapping with the bound lowered by the
  allowed lateness, or leave the operator out of the mapping.
* ``source_positions_monotone`` -- no source partition's end offset went back from the previous
  checkpoint, none disappeared, none is negative (plain Python, no GX).
* ``user:<uid>:<expectation>(<columns>)`` -- each user expectation, run on that operator's rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from state_store.core.keygroups import UPPER_BOUND_MAX_PARALLELISM
from state_store.core.state.descriptors import StateKind
from state_store.validation import _engine
from state_store.validation._engine import Outcome, Planned
from state_store.validation.result import CheckResult, ValidationResult

STATE_COLUMNS = ("operator", "key_group", "state", "kind", "key", "namespace", "key_hash_group")
"""Columns the state frame must have (more are allowed)."""

TIMER_COLUMNS = ("operator", "key_group", "key", "namespace", "timestamp")
"""Columns the timers frame must have; ``domain`` and ``key_hash_group`` are optional."""

STATE_KINDS = tuple(k.value for k in StateKind)
SINGLE_VALUED_KINDS = (StateKind.VALUE.value, StateKind.REDUCING.value, StateKind.AGGREGATING.value)
EVENT_TIME = "event_time"
PROCESSING_TIME = "processing_time"

SUITE = "snapshot"

_ROW = ("operator", "state", "key_group", "namespace", "key")
_UNIQUE = ["operator", "state", "namespace", "key"]
_BOUND = "_epochal_watermark_bound"


def _missing_columns(frame: pd.DataFrame, required: Sequence[str], what: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{what} must be a pandas DataFrame, not {type(frame).__name__}")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{what} lacks columns {missing}; it needs {list(required)} "
            f"(see state_store.validation.snapshot), it has {list(frame.columns)}"
        )


def _unique_index(frame: pd.DataFrame) -> pd.DataFrame:
    # Details look example rows up by the index labels GX reports: they must be unique.
    return frame if frame.index.is_unique else frame.reset_index(drop=True)


def _rows(frame: pd.DataFrame, columns: Sequence[str] = _ROW) -> _engine.Describer:
    def describe_examples(o: Outcome) -> str:
        return _engine.example_rows(frame, o, columns)

    return describe_examples


def _plan_state(frame: pd.DataFrame, max_parallelism: int) -> list[Planned]:
    from great_expectations.expectations.core.expect_column_pair_values_to_be_equal import (
        ExpectColumnPairValuesToBeEqual,
    )
    from great_expectations.expectations.core.expect_column_values_to_be_between import (
        ExpectColumnValuesToBeBetween,
    )
    from great_expectations.expectations.core.expect_column_values_to_be_in_set import (
        ExpectColumnValuesToBeInSet,
    )
    from great_expectations.expectations.core.expect_column_values_to_not_be_in_set import (
        ExpectColumnValuesToNotBeInSet,
    )
    from great_expectations.expectations.core.expect_column_values_to_not_be_null import (
        ExpectColumnValuesToNotBeNull,
    )
    from great_expectations.expectations.core.expect_compound_columns_to_be_unique import (
        ExpectCompoundColumnsToBeUnique,
    )
    from great_expectations.expectations.row_conditions import Column

    rows = _rows(frame)

    def null_key(o: Outcome) -> str:
        return f"{_engine.count(o.unexpected_count, 'row')} with a missing key, e.g. {rows(o)}"

    def json_null_key(o: Outcome) -> str:
        return f"{_engine.count(o.unexpected_count, 'row')} with a null key, e.g. {rows(o)}"

    def bad_kind(o: Outcome) -> str:
        kinds = sorted({repr(_engine.plain(v)) for v in o.partial_values})
        n = _engine.count(o.unexpected_count, "row")
        return f"{n} with an unknown or missing kind {', '.join(kinds)}, e.g. {rows(o)}"

    def duplicates(o: Outcome) -> str:
        examples = []
        for value, count in o.partial_counts[: _engine.EXAMPLES]:
            parts = value if isinstance(value, tuple) else (value,)
            fields = " ".join(_engine.fmt_field(c, v) for c, v in zip(_UNIQUE, parts))
            examples.append(f"{fields} (x{count})")
        return (
            f"{_engine.count(o.unexpected_count, 'row')} with duplicate keys in single-valued states "
            f"(operator, state, namespace, key), e.g. {'; '.join(examples)}"
        )

    def out_of_range(o: Outcome) -> str:
        return (
            f"{_engine.count(o.unexpected_count, 'row')} with a key group outside 0..{max_parallelism - 1} "
            f"(max_parallelism {max_parallelism}), e.g. {rows(o)}"
        )

    def wrong_group(o: Outcome) -> str:
        examples = []
        for label in o.index[: _engine.EXAMPLES]:
            row = frame.loc[label]
            examples.append(
                " ".join(_engine.fmt_field(c, row[c]) for c in ("operator", "state", "key"))
                + f" is in key group {_engine.plain(row['key_group'])} but hashes to "
                f"{_engine.plain(row['key_hash_group'])}"
            )
        return (
            f"{_engine.count(o.unexpected_count, 'row')} in the wrong key group, e.g. {'; '.join(examples)}"
        )

    return [
        Planned("keys_not_null", ExpectColumnValuesToNotBeNull(column="key"), null_key),
        Planned(
            "keys_not_null", ExpectColumnValuesToNotBeInSet(column="key", value_set=["null"]), json_null_key
        ),
        Planned("state_kinds_known", ExpectColumnValuesToNotBeNull(column="kind"), bad_kind),
        Planned(
            "state_kinds_known",
            ExpectColumnValuesToBeInSet(column="kind", value_set=list(STATE_KINDS)),
            bad_kind,
        ),
        Planned(
            "keys_unique",
            ExpectCompoundColumnsToBeUnique(
                column_list=list(_UNIQUE), row_condition=Column("kind").is_in(list(SINGLE_VALUED_KINDS))
            ),
            duplicates,
        ),
        Planned("key_groups_in_range", ExpectColumnValuesToNotBeNull(column="key_group"), out_of_range),
        Planned(
            "key_groups_in_range",
            ExpectColumnValuesToBeBetween(column="key_group", min_value=0, max_value=max_parallelism - 1),
            out_of_range,
        ),
        Planned(
            "key_groups_correct",
            ExpectColumnPairValuesToBeEqual(
                column_A="key_group", column_B="key_hash_group", ignore_row_if="neither"
            ),
            wrong_group,
        ),
    ]


def _watermark_bounds(timers: pd.DataFrame, watermark: int | Mapping[str, int]) -> pd.Series:
    """Per-row bound (float, NaN = not checked): the operator's watermark for event-time timers."""
    if isinstance(watermark, Mapping):
        bound = timers["operator"].map({str(k): float(v) for k, v in watermark.items()}).astype("float64")
    else:
        bound = pd.Series(float(watermark), index=timers.index, dtype="float64")
    if "domain" in timers.columns:
        bound = bound.where(timers["domain"] == EVENT_TIME)
    return bound


def _plan_timers(
    timers: pd.DataFrame, watermark: int | Mapping[str, int] | None
) -> tuple[list[Planned], dict[str, str]]:
    from great_expectations.expectations.core.expect_column_pair_values_a_to_be_greater_than_b import (
        ExpectColumnPairValuesAToBeGreaterThanB,
    )
    from great_expectations.expectations.core.expect_column_pair_values_to_be_equal import (
        ExpectColumnPairValuesToBeEqual,
    )
    from great_expectations.expectations.core.expect_column_values_to_be_in_set import (
        ExpectColumnValuesToBeInSet,
    )

    planned: list[Planned] = []
    passed: dict[str, str] = {}
    n = len(timers)
    if "key_hash_group" in timers.columns:

        def wrong_group(o: Outcome) -> str:
            rows = _engine.example_rows(timers, o, ("operator", "key", "namespace", "timestamp", "key_group"))
            return f"{_engine.count(o.unexpected_count, 'timer')} in the wrong key group, e.g. {rows}"

        planned.append(
            Planned(
                "timer_key_groups_correct",
                ExpectColumnPairValuesToBeEqual(
                    column_A="key_group", column_B="key_hash_group", ignore_row_if="neither"
                ),
                wrong_group,
            )
        )
        passed["timer_key_groups_correct"] = f"{n} timers in the key group their key hashes to"
    if watermark is not None:

        def overdue(o: Outcome) -> str:
            examples = []
            for label in o.index[: _engine.EXAMPLES]:
                row = timers.loc[label]
                examples.append(
                    " ".join(
                        _engine.fmt_field(c, row[c]) for c in ("operator", "key", "namespace", "timestamp")
                    )
                    + f" <= watermark {int(row[_BOUND])}"
                )
            return (
                f"{_engine.count(o.unexpected_count, 'event-time timer')} at or behind the watermark "
                f"(they should have fired), e.g. {'; '.join(examples)}"
            )

        def bad_domain(o: Outcome) -> str:
            domains = sorted({repr(_engine.plain(v)) for v in o.partial_values})
            return f"{_engine.count(o.unexpected_count, 'timer')} with an unknown domain {', '.join(domains)}"

        if "domain" in timers.columns:
            planned.append(
                Planned(
                    "timers_not_behind_watermark",
                    ExpectColumnValuesToBeInSet(column="domain", value_set=[EVENT_TIME, PROCESSING_TIME]),
                    bad_domain,
                )
            )
        planned.append(
            Planned(
                "timers_not_behind_watermark",
                ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="timestamp",
                    column_B=_BOUND,
                    or_equal=False,
                    ignore_row_if="either_value_is_missing",
                ),
                overdue,
            )
        )
        what = (
            f"the watermark {watermark}"
            if not isinstance(watermark, Mapping)
            else f"the watermarks of {len(watermark)} operators"
        )
        passed["timers_not_behind_watermark"] = f"{n} timers checked: none at or behind {what}"
    return planned, passed


def check_positions(
    positions: Mapping[str, int], previous_positions: Mapping[str, int] | None
) -> CheckResult:
    """``source_positions_monotone``: end offsets per source partition never go back or vanish."""
    name = "source_positions_monotone"
    problems: list[str] = []
    for partition, offset in sorted(positions.items()):
        if isinstance(offset, bool) or not isinstance(offset, int):
            problems.append(f"partition {partition!r} has a non-integer end offset {offset!r}")
        elif offset < 0:
            problems.append(f"partition {partition!r} has a negative end offset {offset}")
    if previous_positions is None:
        if problems:
            return CheckResult(name, False, "; ".join(problems), len(problems))
        return CheckResult(name, True, f"{len(positions)} partitions; no previous checkpoint to compare with")
    for partition, before in sorted(previous_positions.items()):
        if partition not in positions:
            problems.append(f"partition {partition!r} disappeared (was at {before})")
            continue
        now = positions[partition]
        if isinstance(now, int) and not isinstance(now, bool) and now < before:
            problems.append(f"partition {partition!r} went back from {before} to {now}")
    if problems:
        return CheckResult(name, False, "; ".join(problems), len(problems))
    new = len(set(positions) - set(previous_positions))
    return CheckResult(
        name,
        True,
        f"{len(positions)} partitions, none behind the previous checkpoint"
        + (f" ({new} new)" if new else ""),
    )


def _user_label(uid: str, expectation: Any, taken: set[str]) -> str:
    base = f"user:{uid}:{_engine.expectation_label(expectation)}"
    label, i = base, 2
    while label in taken:
        label, i = f"{base}#{i}", i + 1
    taken.add(label)
    return label


def _user_checks(state: pd.DataFrame, user_expectations: Mapping[str, Sequence[Any]]) -> list[CheckResult]:
    checks: list[CheckResult] = []
    taken: set[str] = set()
    for uid, expectations in user_expectations.items():
        if not expectations:
            continue
        rows = state[state["operator"] == uid]
        planned = []
        passed = {}
        for raw in expectations:
            expectation = _engine.coerce_expectation(raw)
            label = _user_label(uid, expectation, taken)
            planned.append(
                Planned(label, expectation, _engine.generic_describer(_engine.expectation_label(expectation)))
            )
            passed[label] = f"passed on {len(rows)} rows of operator {uid!r}"
        outcomes = _engine.run(rows, planned, f"{SUITE}.user.{uid}")
        checks.extend(_engine.to_checks(planned, outcomes, passed))
    return checks


def validate_snapshot(
    state: pd.DataFrame,
    *,
    max_parallelism: int,
    positions: dict[str, int],
    previous_positions: dict[str, int] | None = None,
    timers: pd.DataFrame | None = None,
    watermark: int | Mapping[str, int] | None = None,
    user_expectations: Mapping[str, Sequence[Any]] | None = None,
) -> ValidationResult:
    """Run the snapshot suite (see the module docstring for the frames and the checks).

    ``positions`` / ``previous_positions``: source partition id -> end offset of this checkpoint and
    of the previous completed one (None: first checkpoint). ``watermark``: one watermark for every
    operator, or operator uid -> watermark (operators left out are not checked). ``user_expectations``:
    operator uid -> GX Expectation objects or dicts ``{"type": "expect_...", "kwargs": {...}}``, each
    run on that operator's rows of ``state``.

    Raises ValueError/TypeError for bad input (missing columns, an invalid max_parallelism, an
    invalid user expectation); every finding about the data is a failed check, never an exception.
    """
    if isinstance(max_parallelism, bool) or not isinstance(max_parallelism, int):
        raise TypeError(f"max_parallelism must be an int, not {type(max_parallelism).__name__}")
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"max_parallelism {max_parallelism} is outside 1..{UPPER_BOUND_MAX_PARALLELISM}")
    _missing_columns(state, STATE_COLUMNS, "the state frame")
    state = _unique_index(state)
    if timers is not None:
        _missing_columns(timers, TIMER_COLUMNS, "the timers frame")
    if user_expectations:
        # Fail fast on a bad configuration, before spending seconds on the frame checks.
        for raw_list in user_expectations.values():
            for raw in raw_list:
                _engine.coerce_expectation(raw)

    n = len(state)
    single = int(state["kind"].isin(SINGLE_VALUED_KINDS).sum())
    planned = _plan_state(state, max_parallelism)
    passed = {
        "keys_not_null": f"{n} rows, no null key",
        "state_kinds_known": f"{n} rows of known state kinds",
        "keys_unique": f"{single} single-valued rows, keys unique",
        "key_groups_in_range": f"{n} rows in 0..{max_parallelism - 1}",
        "key_groups_correct": f"{n} rows in the key group their key hashes to",
    }
    checks = _engine.to_checks(planned, _engine.run(state, planned, SUITE), passed)

    if timers is not None:
        timers = _unique_index(timers)
        if watermark is not None:
            timers = timers.assign(**{_BOUND: _watermark_bounds(timers, watermark)})
        timer_planned, timer_passed = _plan_timers(timers, watermark)
        checks.extend(
            _engine.to_checks(
                timer_planned, _engine.run(timers, timer_planned, f"{SUITE}.timers"), timer_passed
            )
        )

    checks.append(check_positions(positions, previous_positions))
    if user_expectations:
        checks.extend(_user_checks(state, user_expectations))
    return ValidationResult.of(SUITE, checks)
