"""All keyed state of one key as one JSON text: how a spill store on local disk holds the state of a
per-key process function (``spark_jobs.runtime.spill_rows``).

One text per key, an object from state name to its kind and rows, names sorted::

    {"clicks": ["list", [[null, 3, null], [null, 5, 1700000000000]]],
     "seen":   ["map",  [[null, ["a", {"n": 1}], null]]],
     "total":  ["value",[[null, 42.5, null]]]}

A row is ``[namespace, value, expiry_ms]``: the namespace as a tagged key (``json_codec``), the value
as plain JSON (a map row's value is ``[user_key as a tagged key, user_value]``), ``expiry_ms`` an int
or null. These are the cells of a state file's row (``state_store.formats.keyed``), so a key's rows
read back equal the rows a heap backend snapshots: the same values, the same order within a list
state and a map state, the same expiries.

Invariants: a state with no rows is left out, so a key without state has no text (never ``{}``);
the text of equal rows is byte-identical (canonical JSON), so comparing texts finds the keys whose
state changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import StateRow
from state_store.formats.json_codec import key_from_jsonable, key_to_json, value_to_json


class KeyRowsError(ValueError):
    """A key's state text that this codec did not write."""


def encode_key_rows(key: Any, states: Mapping[str, tuple[StateKind, Sequence[StateRow]]]) -> str | None:
    """The text of one key's rows per state (None when no state has rows). Raises
    ``StateValueError`` naming the state and the key for a value that is not JSON."""
    parts = []
    for name in sorted(states):
        kind, rows = states[name]
        if not rows:
            continue
        cells = []
        for row in rows:
            if kind is StateKind.MAP:
                user_key, user_value = row.value
                value = f"[{key_to_json(user_key)},{value_to_json(user_value, state=name, key=key)}]"
            else:
                value = value_to_json(row.value, state=name, key=key)
            expiry = "null" if row.expiry_ms is None else str(int(row.expiry_ms))
            cells.append(f"[{key_to_json(row.namespace)},{value},{expiry}]")
        parts.append(f'{json.dumps(name, ensure_ascii=False)}:["{kind.value}",[{",".join(cells)}]]')
    return "{" + ",".join(parts) + "}" if parts else None


def decode_key_rows(
    key: Any, text: str, now_ms: int | None = None
) -> dict[str, tuple[StateKind, list[StateRow]]]:
    """Inverse of :func:`encode_key_rows` for ``key``; :class:`KeyRowsError` on a text it would not
    write. ``now_ms``: leave out the rows that expired by then (``expiry_ms <= now_ms``) and the
    states left without rows."""
    try:
        states = json.loads(text)
        out = {}
        for name, (kind_text, cells) in states.items():
            kind = StateKind(kind_text)
            rows = []
            for namespace, value, expiry in cells:
                if now_ms is not None and expiry is not None and expiry <= now_ms:
                    continue
                if kind is StateKind.MAP:
                    user_key, user_value = value
                    value = (key_from_jsonable(user_key), user_value)
                rows.append(StateRow(key, key_from_jsonable(namespace), value, expiry))
            if rows or now_ms is None:
                out[name] = (kind, rows)
        return out
    except (ValueError, TypeError, AttributeError) as exc:
        raise KeyRowsError(
            f"the state on disk of key {key!r} is not a text Epochal wrote ({exc}): restore from an "
            "earlier checkpoint or a savepoint"
        ) from None


def latest_expiry(states: Mapping[str, tuple[StateKind, Sequence[StateRow]]]) -> int | None:
    """When all of a key's rows have expired: the latest expiry, or None when a row never expires."""
    latest = None
    for _, rows in states.values():
        for row in rows:
            if row.expiry_ms is None:
                return None
            latest = row.expiry_ms if latest is None else max(latest, row.expiry_ms)
    return latest


def rows_by_key(
    states: Mapping[str, Sequence[StateRow]], kinds: Mapping[str, StateKind]
) -> dict[Any, dict[str, tuple[StateKind, list[StateRow]]]]:
    """Rows of several states (one key group's, as snapshots hold them) grouped by key, each key's
    states in the order of ``states`` and its rows in their order."""
    out: dict[Any, dict[str, tuple[StateKind, list[StateRow]]]] = {}
    for name, rows in states.items():
        kind = kinds[name]
        for row in rows:
            per_key = out.setdefault(row.key, {})
            entry = per_key.get(name)
            if entry is None:
                entry = per_key[name] = (kind, [])
            entry[1].append(row)
    return out


def merged_states(
    decoded: Iterable[tuple[int, dict[str, tuple[StateKind, list[StateRow]]]]],
) -> tuple[dict[int, dict[str, list[StateRow]]], dict[str, StateKind]]:
    """Decoded keys ``(key group, states)`` as a snapshot's key groups, and the kinds they name."""
    groups: dict[int, dict[str, list[StateRow]]] = {}
    kinds: dict[str, StateKind] = {}
    for kg, states in decoded:
        group = groups.setdefault(kg, {})
        for name, (kind, rows) in states.items():
            if kinds.setdefault(name, kind) is not kind:
                raise KeyRowsError(
                    f"state {name!r} is a {kinds[name].value} state for one key and a {kind.value} state "
                    "for another on disk: restore from an earlier checkpoint or a savepoint"
                )
            group.setdefault(name, []).extend(rows)
    return groups, kinds
