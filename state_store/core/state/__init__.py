"""Keyed and operator state of one subtask (pure: standard library only, time injected).

* :class:`KeyedStateBackend` -- heap keyed state over the key groups a subtask owns: per-record
  handles (``get_state``), vectorized chunk access (``bulk``), TTL, dirty tracking, snapshot/restore.
* :class:`OperatorStateBackend` -- non-keyed list state with Flink's redistribution on rescale.

Key groups and the stable hash live in ``state_store.core.keygroups``; file formats in
``state_store.formats``.
"""

from state_store.core.state.backend import (
    VOID_NAMESPACE,
    KeyedStateBackend,
    KeyOutOfRangeError,
    NoCurrentKeyError,
    StateRegistrationError,
)
from state_store.core.state.bulk import (
    BulkAggregatingState,
    BulkListState,
    BulkMapState,
    BulkReducingState,
    BulkValueState,
)
from state_store.core.state.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateKind,
    StateTtlConfig,
    TtlUpdateType,
    TtlVisibility,
    ValueStateDescriptor,
)
from state_store.core.state.handles import AggregatingState, ListState, MapState, ReducingState, ValueState
from state_store.core.state.operator import (
    OperatorListState,
    OperatorStateBackend,
    OperatorStateMode,
    OperatorStateSnapshot,
    redistribute,
    redistribute_operator_state,
    redistribute_union,
)
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow

__all__ = [
    "VOID_NAMESPACE",
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "BulkAggregatingState",
    "BulkListState",
    "BulkMapState",
    "BulkReducingState",
    "BulkValueState",
    "KeyOutOfRangeError",
    "KeyedStateBackend",
    "KeyedStateSnapshot",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "NoCurrentKeyError",
    "OperatorListState",
    "OperatorStateBackend",
    "OperatorStateMode",
    "OperatorStateSnapshot",
    "ReducingState",
    "ReducingStateDescriptor",
    "StateKind",
    "StateRegistrationError",
    "StateRow",
    "StateTtlConfig",
    "TtlUpdateType",
    "TtlVisibility",
    "ValueState",
    "ValueStateDescriptor",
    "redistribute",
    "redistribute_operator_state",
    "redistribute_union",
]
