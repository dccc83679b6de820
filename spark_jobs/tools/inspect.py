"""Read side of the State Processor API: an operator's keyed state, timers and source positions
as frames (pandas or Arrow; Spark via ``spark.createDataFrame``), and diffs between snapshots."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa

from spark_jobs.lifecycle.snapshots import Snapshot, SnapshotError
from state_store.core.state.descriptors import StateKind
from state_store.formats.json_codec import key_to_json, value_to_json


def operator_state(snapshot: Snapshot, uid: str, *, key: Any = None) -> pd.DataFrame:
    """One row per state entry of operator ``uid`` (optionally one key): key_group, state, key,
    namespace, value (JSON text), expiry_ms."""
    if uid not in snapshot.operators:
        known = ", ".join(sorted(snapshot.operators)) or "none"
        raise SnapshotError(
            f"operator uid {uid!r} has no state in {snapshot.location}; stateful uids: {known}"
        )
    op = snapshot.operators[uid]
    rows: list[dict[str, Any]] = []
    wanted = None if key is None else key_to_json(key)
    if op.keyed is not None:
        for kg, states in op.keyed.key_groups.items():
            for name, entries in states.items():
                is_map = op.keyed.kinds[name] is StateKind.MAP
                for row in entries:
                    key_json = key_to_json(row.key)
                    if wanted is not None and key_json != wanted:
                        continue
                    value = row.value
                    text = (
                        f"[{key_to_json(value[0])},{value_to_json(value[1], state=name, key=row.key)}]"
                        if is_map
                        else value_to_json(value, state=name, key=row.key)
                    )
                    rows.append(
                        {
                            "key_group": kg,
                            "state": name,
                            "key": key_json,
                            "namespace": key_to_json(row.namespace),
                            "value": text,
                            "expiry_ms": row.expiry_ms,
                        }
                    )
    columns = ["key_group", "state", "key", "namespace", "value", "expiry_ms"]
    return pd.DataFrame(rows, columns=columns)


def operator_timers(snapshot: Snapshot, uid: str) -> pd.DataFrame:
    op = snapshot.operators.get(uid)
    rows = [
        {
            "key_group": kg,
            "domain": domain,
            "timestamp": ts,
            "key": key_to_json(k),
            "namespace": key_to_json(ns),
        }
        for kg, domains in (op.timers.items() if op else ())
        for domain, entries in domains.items()
        for ts, k, ns in entries
    ]
    return pd.DataFrame(rows, columns=["key_group", "domain", "timestamp", "key", "namespace"])


def source_positions(snapshot: Snapshot) -> pd.DataFrame:
    rows = [{"source_partition": k, "position": v} for k, v in sorted(snapshot.positions.items())]
    return pd.DataFrame(rows, columns=["source_partition", "position"])


def as_arrow(frame: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=False)


def _entries(snapshot: Snapshot, uid: str) -> dict[tuple[str, str, str], str]:
    if uid not in snapshot.operators:
        return {}
    frame = operator_state(snapshot, uid)
    grouped = frame.groupby(["state", "key", "namespace"])["value"].apply(lambda v: "\n".join(v))
    return {k: str(v) for k, v in grouped.items()}


def diff(a: Snapshot, b: Snapshot) -> dict[str, dict[str, int]]:
    """Per operator uid: state entries (state, key, namespace) added, removed and changed from a to b."""
    out: dict[str, dict[str, int]] = {}
    for uid in sorted(set(a.operators) | set(b.operators)):
        old, new = _entries(a, uid), _entries(b, uid)
        out[uid] = {
            "added": len(new.keys() - old.keys()),
            "removed": len(old.keys() - new.keys()),
            "changed": sum(1 for k in old.keys() & new.keys() if old[k] != new[k]),
        }
    return out
