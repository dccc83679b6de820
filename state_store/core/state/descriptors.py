"""State descriptors and TTL configuration (Flink's ``StateDescriptor`` family and ``StateTtlConfig``).

A descriptor names one keyed state of an operator and fixes its kind; the name is the identity
stored in snapshots, so renaming a descriptor loses its state. Registering a name again with another
kind or another TTL is refused; a second descriptor of the same kind and TTL returns the first
registration's handle (its ``reduce_fn`` / ``aggregate_function`` / ``default`` win).

TTL semantics (Flink's ``TtlStateBase``; time is the backend's injected ``now_ms``)
------------------------------------------------------------------------------------
* A write sets ``expiry_ms = now + ttl_ms``. With ``ON_READ_AND_WRITE`` a read that finds a live
  entry also pushes its expiry to ``now + ttl_ms``.
* Off-by-one trap: an entry is expired when ``expiry_ms <= now`` -- at exactly ``now == expiry_ms``
  it is already gone (Flink's ``TtlUtils.expired``).
* A read that finds an expired entry removes it; it returns the stale value once if the visibility
  is ``RETURN_EXPIRED_IF_NOT_CLEANED_UP``, else behaves as if the entry were absent.
* List state expires per element and map state per map entry; value, reducing and aggregating
  state expire as a whole. Adding to an expired reducing/aggregating state starts from scratch.
* Expired entries are dropped from every snapshot (full-snapshot cleanup) and by
  ``KeyedStateBackend.cleanup_expired()``.

``default`` of :class:`ValueStateDescriptor` is returned as is (not copied): use immutable defaults.

The generic descriptors are frozen but not slotted: ``ValueStateDescriptor[int]("n")`` sets
``__orig_class__`` on the instance, which a slotted frozen dataclass turns into a TypeError.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")
IN_contra = TypeVar("IN_contra", contravariant=True)
OUT_co = TypeVar("OUT_co", covariant=True)
UK = TypeVar("UK")
UV = TypeVar("UV")


class StateKind(enum.Enum):
    """The kind of a keyed state; stored with every snapshot, checked on registration."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"


class TtlUpdateType(enum.Enum):
    """When an entry's expiry is pushed forward."""

    ON_CREATE_AND_WRITE = "on_create_and_write"
    ON_READ_AND_WRITE = "on_read_and_write"


class TtlVisibility(enum.Enum):
    """Whether a read may return an expired entry that has not been removed yet."""

    NEVER_RETURN_EXPIRED = "never_return_expired"
    RETURN_EXPIRED_IF_NOT_CLEANED_UP = "return_expired_if_not_cleaned_up"


@dataclass(frozen=True, slots=True)
class StateTtlConfig:
    """Time-to-live of state entries, in milliseconds of the backend's ``now_ms`` clock."""

    ttl_ms: int
    update_type: TtlUpdateType = TtlUpdateType.ON_CREATE_AND_WRITE
    visibility: TtlVisibility = TtlVisibility.NEVER_RETURN_EXPIRED

    def __post_init__(self) -> None:
        if not isinstance(self.ttl_ms, int) or isinstance(self.ttl_ms, bool) or self.ttl_ms <= 0:
            raise ValueError(f"ttl_ms must be a positive int of milliseconds, got {self.ttl_ms!r}")


class AggregateFunction(Protocol[IN_contra, ACC, OUT_co]):
    """Flink's ``AggregateFunction``: an incremental aggregation with a mergeable accumulator.

    ``add`` and ``merge`` may mutate and return their first argument; the backend always stores the
    returned object. ``merge`` must be associative: bulk ``merge_many`` relies on it to fold
    per-chunk partial accumulators into the stored ones.
    """

    def create_accumulator(self) -> ACC: ...

    def add(self, value: IN_contra, accumulator: ACC) -> ACC: ...

    def get_result(self, accumulator: ACC) -> OUT_co: ...

    def merge(self, a: ACC, b: ACC) -> ACC: ...


@dataclass(frozen=True)
class ValueStateDescriptor(Generic[T]):
    """A single value per key (and namespace); ``value()`` returns ``default`` when unset."""

    name: str
    default: T | None = None
    ttl: StateTtlConfig | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.VALUE


@dataclass(frozen=True)
class ListStateDescriptor(Generic[T]):
    """An ordered list of elements per key (and namespace)."""

    name: str
    ttl: StateTtlConfig | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.LIST


@dataclass(frozen=True)
class MapStateDescriptor(Generic[UK, UV]):
    """A map per key (and namespace). User keys follow the key rules (hashable scalars/tuples)."""

    name: str
    ttl: StateTtlConfig | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.MAP


@dataclass(frozen=True)
class ReducingStateDescriptor(Generic[T]):
    """A value per key folded with ``reduce_fn(stored, new)`` on every ``add``."""

    name: str
    reduce_fn: Callable[[T, T], T]
    ttl: StateTtlConfig | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.REDUCING


@dataclass(frozen=True)
class AggregatingStateDescriptor(Generic[IN, ACC, OUT]):
    """An accumulator per key driven by ``aggregate_function``; ``get()`` returns its result."""

    name: str
    aggregate_function: AggregateFunction[IN, ACC, OUT]
    ttl: StateTtlConfig | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.AGGREGATING


AnyDescriptor = (
    ValueStateDescriptor[Any]
    | ListStateDescriptor[Any]
    | MapStateDescriptor[Any, Any]
    | ReducingStateDescriptor[Any]
    | AggregatingStateDescriptor[Any, Any, Any]
)
