"""One frozen spec per step kind: what a step of the job graph is, as a typed value.

``Job``, ``DataStream`` and ``KeyedStream`` build these; the graph (``graph.Step``), the runtime
and the lifecycle read their fields and ask them questions instead of reading magic keys::

    kind          source | spark | key_by | map | filter | async | process | window | dedup | connect | sink
    stateful      the step has a uid and acknowledges every checkpoint (sources, sinks, keyed steps)
    keyed         the step needs keyed input (a key_by or connect before it)
    restorable    a restore maps snapshot state onto it (sources: positions; keyed steps: keyed state)
    state_kinds() the states it keeps, name -> kind, as a restore plan and a snapshot report them
    side_outputs(uid)  its outputs routed to sinks of their own (a window's late data)

``map`` and ``flat_map`` are both a :class:`MapSpec` (the same vectorized operator). The runtime
operator of a spec is built by ``spark_jobs.runtime.operators.build`` (a builder per spec type):
the API never imports the runtime.

Invariants: a spec is immutable (replace a step's spec with ``dataclasses.replace``); every spec
type has exactly one ``kind``; ``state_kinds`` depends on the spec's fields only, never on state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from spark_jobs.api.windows import EventTimeSessionWindows
from state_store.core.state.descriptors import StateKind

Key = str | Callable[..., Any]
"""A key: a column name, or a function of a record batch returning one key per row."""

SOURCE_STATE: Mapping[str, str] = {"positions": "operator_list"}
"""A source's state in a snapshot: its positions (and watermark state) per partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SideOutput:
    """Records a step emits under ``tag`` go to ``sink``, acknowledged under ``uid``."""

    tag: str
    uid: str
    sink: Any

    @classmethod
    def late(cls, step_uid: str, sink: Any) -> SideOutput:
        """A window's late data: tag ``late``, acknowledged as ``<step uid>-late``."""
        return cls(tag="late", uid=f"{step_uid}-late", sink=sink)


@dataclass(frozen=True, slots=True)
class StepSpec:
    """Base of every spec: a stateless step chained into the stage it follows."""

    kind: ClassVar[str]
    stateful: ClassVar[bool] = False
    keyed: ClassVar[bool] = False
    restorable: ClassVar[bool] = False

    def state_kinds(self) -> dict[str, str]:
        return {}

    def side_outputs(self, uid: str) -> tuple[SideOutput, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class SourceSpec(StepSpec):
    """``job.source(source, uid=, out_of_orderness_ms=, idleness_ms=)``: a replayable source;
    watermark = max event time - ``watermark_lag_ms`` - 1 per partition."""

    kind: ClassVar[str] = "source"
    stateful: ClassVar[bool] = True
    restorable: ClassVar[bool] = True

    source: Any
    out_of_orderness_ms: int = 0
    idleness_ms: int | None = None

    @property
    def watermark_lag_ms(self) -> int:
        return int(self.out_of_orderness_ms or 0)

    def state_kinds(self) -> dict[str, str]:
        return dict(SOURCE_STATE)


@dataclass(frozen=True, slots=True)
class SparkSpec(StepSpec):
    """``.spark(fn, schema=)`` right after a source: a stateless DataFrame stage. Spark runs
    ``fn(DataFrame) -> DataFrame`` on each epoch's cut of the source, on the driver's session,
    before the rest of the chain (``spark_jobs.runtime.spark_stage``). ``schema``: the output's
    Arrow schema (None: inferred from the first epoch a process runs, then checked)."""

    kind: ClassVar[str] = "spark"

    fn: Callable[..., Any]
    schema: Any = None


@dataclass(frozen=True, slots=True)
class KeyBySpec(StepSpec):
    """``.key_by(key)``: the exchange that starts a new stage keyed by ``key``."""

    kind: ClassVar[str] = "key_by"

    key: Key


@dataclass(frozen=True, slots=True)
class MapSpec(StepSpec):
    """``.map(fn)`` and ``.flat_map(fn)``: a record batch in, a batch (or table, or nothing) out."""

    kind: ClassVar[str] = "map"

    fn: Callable[..., Any]


@dataclass(frozen=True, slots=True)
class FilterSpec(StepSpec):
    """``.filter(fn)``: ``fn`` returns a boolean mask for the batch."""

    kind: ClassVar[str] = "filter"

    fn: Callable[..., Any]


@dataclass(frozen=True, slots=True)
class AsyncSpec(StepSpec):
    """``.async_enrich(fn, ...)``: bounded-concurrency async calls per record (no state)."""

    kind: ClassVar[str] = "async"

    fn: Any
    ordered: bool = True
    capacity: int = 100
    timeout_ms: int = 5_000
    on_timeout: str = "side_output"


@dataclass(frozen=True, slots=True)
class KeyedStepSpec(StepSpec):
    """A step with keyed state and timers: it has a uid and follows a key_by (or connect)."""

    stateful: ClassVar[bool] = True
    keyed: ClassVar[bool] = True
    restorable: ClassVar[bool] = True


def _descriptor_kinds(fn: Any) -> dict[str, str]:
    """The states a user function declares (``state_descriptors``), name -> kind."""
    return {d.name: d.kind.value for d in getattr(fn, "state_descriptors", ())}


@dataclass(frozen=True, slots=True)
class ProcessSpec(KeyedStepSpec):
    """``.process(fn, uid=)`` on a keyed stream: a KeyedProcessFunction."""

    kind: ClassVar[str] = "process"

    fn: Any

    def state_kinds(self) -> dict[str, str]:
        return _descriptor_kinds(self.fn)


@dataclass(frozen=True, slots=True)
class WindowSpec(KeyedStepSpec):
    """``.window(assigner, aggregate, uid=, allowed_lateness_ms=, late_output=)``: one accumulator
    per (key, window) -- ``acc``; session windows keep ``session`` (one entry per open session)
    without allowed lateness and ``sessions`` (one list per key, and timers) with it, and each
    converts the other's at a restore -- and, with a
    ``late_output`` sink, the ``late`` side output acknowledged as ``<uid>-late``."""

    kind: ClassVar[str] = "window"

    assigner: Any
    aggregate: Any
    allowed_lateness_ms: int = 0
    late_output: Any = None

    def state_kinds(self) -> dict[str, str]:
        if isinstance(self.assigner, EventTimeSessionWindows):  # each mode reads the other's
            return {"session": StateKind.VALUE.value, "sessions": StateKind.VALUE.value}
        return {"acc": StateKind.VALUE.value}

    def side_outputs(self, uid: str) -> tuple[SideOutput, ...]:
        if self.late_output is None:
            return ()
        return (SideOutput.late(uid, self.late_output),)


@dataclass(frozen=True, slots=True)
class DedupSpec(KeyedStepSpec):
    """``.deduplicate(ttl_ms=, uid=)``: a ``seen`` flag per key, expiring ``ttl_ms`` after it was set."""

    kind: ClassVar[str] = "dedup"

    ttl_ms: int

    def state_kinds(self) -> dict[str, str]:
        return {"seen": StateKind.VALUE.value}


@dataclass(frozen=True, slots=True)
class ConnectSpec(KeyedStepSpec):
    """``a.connect(b).process(fn, uid=)``: two keyed streams (``keys`` in input order) into one
    CoProcessFunction; the step is itself the exchange that starts its stage."""

    kind: ClassVar[str] = "connect"

    keys: tuple[Key, Key]
    fn: Any

    def state_kinds(self) -> dict[str, str]:
        return _descriptor_kinds(self.fn)


@dataclass(frozen=True, slots=True)
class SinkSpec(StepSpec):
    """``.sink(sink, uid=)``: a transactional sink (``sink.create(store, job_id, uid)``); it
    acknowledges every checkpoint but holds no state a restore maps."""

    kind: ClassVar[str] = "sink"
    stateful: ClassVar[bool] = True

    sink: Any


STEP_SPECS: tuple[type[StepSpec], ...] = (
    SourceSpec,
    SparkSpec,
    KeyBySpec,
    MapSpec,
    FilterSpec,
    AsyncSpec,
    ProcessSpec,
    WindowSpec,
    DedupSpec,
    ConnectSpec,
    SinkSpec,
)
"""Every spec type a job can contain (one per step kind)."""
