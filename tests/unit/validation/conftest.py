"""Shared frames for the validation tests.

The GX context is per process (``state_store.validation`` creates it once), so the import cost
(several seconds) is paid by the first test only; ``gx_ready`` makes that explicit and module-wide.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from state_store.core.keygroups import key_group_of
from state_store.formats.json_codec import key_to_json
from state_store.validation import warm_up

MAX_P = 128


@pytest.fixture(scope="session", autouse=True)
def gx_ready() -> float:
    return warm_up()


def state_rows(
    operator: str, state: str, kind: str, keys: list[Any], namespace: Any = None, **extra: list[Any]
) -> pd.DataFrame:
    """Rows as a caller builds them: JSON key/namespace and the key group recomputed from the key."""
    groups = [key_group_of(k, MAX_P) for k in keys]
    frame = pd.DataFrame(
        {
            "operator": operator,
            "key_group": groups,
            "state": state,
            "kind": kind,
            "key": [key_to_json(k) for k in keys],
            "namespace": key_to_json(namespace),
            "key_hash_group": groups,
        }
    )
    for column, values in extra.items():
        frame[column] = values
    return frame


def clean_state() -> pd.DataFrame:
    users = [f"u{i}" for i in range(50)]
    return pd.concat(
        [
            state_rows("counts", "n", "value", users, value=list(range(50))),
            state_rows("sessions", "acc", "aggregating", users[:10], namespace=1000, value=[1] * 10),
            state_rows("sessions", "acc", "aggregating", users[:10], namespace=2000, value=[2] * 10),
            # list and map state: one row per element / entry, so a key repeats legitimately
            state_rows("recent", "clicks", "list", ["u1", "u1", "u1", ("u", 2)], value=[1, 2, 3, 4]),
            state_rows("recent", "by_page", "map", ["u1", "u1"], value=[5, 6]),
        ],
        ignore_index=True,
    )


def clean_timers() -> pd.DataFrame:
    keys = ["u1", "u2", "u3"]
    groups = [key_group_of(k, MAX_P) for k in keys]
    return pd.DataFrame(
        {
            "operator": "sessions",
            "key_group": groups,
            "key": [key_to_json(k) for k in keys],
            "namespace": "1000",
            "timestamp": [1999, 2500, 900],
            "domain": ["event_time", "event_time", "processing_time"],
            "key_hash_group": groups,
        }
    )
