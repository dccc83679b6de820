"""The user-facing pipeline API: ``Job``, ``DataStream``, ``KeyedStream``.

Example (the shape of ``spark_jobs/examples/clickstream.py``)::

    job = Job("clickstream", parallelism=2, mode="exactly_once")
    events = job.source(GeneratorSource(...), uid="events", out_of_orderness_ms=2_000)
    unique = events.key_by("event_id").deduplicate(ttl_ms=3_600_000, uid="dedup")
    counts = unique.key_by("page").window(TumblingEventTimeWindows(10_000), Count(), uid="page-counts")
    counts.sink(ParquetSinkSpec(), uid="page-counts-sink")

Record-level functions are vectorized: ``map``/``flat_map`` take and return a ``pyarrow.RecordBatch``
and ``filter`` returns a boolean array for the batch. Per-record Python is the slow path.
``spark`` (right after a source) hands each epoch's cut to Spark SQL as a DataFrame.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from spark_jobs.api.graph import JobDefinitionError, JobGraph, Step
from spark_jobs.api.specs import (
    AsyncSpec,
    ConnectSpec,
    DedupSpec,
    FilterSpec,
    KeyBySpec,
    MapSpec,
    ProcessSpec,
    SinkSpec,
    SourceSpec,
    SparkSpec,
    StepSpec,
    WindowSpec,
)
from state_store.core.config import CheckpointConfig
from state_store.core.keygroups import check_max_parallelism, check_parallelism
from state_store.core.layout import validate_name
from state_store.core.stream.modes import parse_checkpointing_mode

BatchFn = Callable[[pa.RecordBatch], pa.RecordBatch]
MaskFn = Callable[[pa.RecordBatch], Any]
KeySpec = str | Callable[[pa.RecordBatch], Any]


@dataclass
class Job:
    """A pipeline with a stable ``job_id``; its state lives under ``<store>/<job_id>/``.

    * ``max_parallelism`` -- number of key groups (the unit of rescaling); fixed for the job's life.
    * ``parallelism`` -- subtasks per stage (each owns a contiguous range of key groups).
    * ``mode`` -- ``exactly_once`` (aligned), ``at_least_once`` or ``unaligned``.
    * ``max_records_per_epoch`` -- cap of records per source partition per epoch.
    * ``expectations`` -- Great Expectations per operator uid (objects or ``{"type", "kwargs"}``
      dicts), checked with the built-in snapshot suite on every validated checkpoint.
    * ``chunk_size`` -- records per Arrow batch read from a source (the unit of vectorized work,
      and of in-flight data in unaligned checkpoints, like Flink's network buffers).
    * ``rescale_on_change`` -- what the next epoch does when ``parallelism`` differs from the one
      recorded with the job's running parallelism: ``apply`` (rescale, printing the restore plan)
      or ``refuse`` (fail with the remedy: a restore with ``--parallelism``). A parallelism set
      by a restore sticks while the definition is unchanged.
    * ``deep_verify`` -- completion reads every state file back and checks its checksum before
      deciding (``CheckpointConfig.deep_verify``; off by default: presence and size from the
      listing, the writer's checksum from the ack; restores and ``epochal validate --deep`` read
      every byte).
    * ``local_recovery`` -- where the process survives between epochs, the next epoch adopts the
      live operators of the previous one when they equal the checkpoint it restores from, instead
      of reading that checkpoint's state files (Flink's local recovery; off by default:
      ``spark_jobs.runtime.warm`` says when it applies and what it costs).
    * ``state_memory_mb`` -- a memory budget per subtask for keyed state: the value state of
      batch process functions then lives in a spill store on local disk (sorted Arrow runs under
      ``state_dir``) and may be many times larger than the budget; checkpoints upload only the
      run files written since the checkpoint restored from. Other operators keep their state in
      memory and say so once in the log. None (the default): every state in memory.
      ``spark_jobs.runtime.spill_state`` says what it costs.
    * ``state_dir`` -- where subtasks keep their spill stores (default: the system's temporary
      directory); one directory per subtask attempt, deleted when the subtask is done with it.
    """

    job_id: str
    parallelism: int = 2
    max_parallelism: int = 128
    mode: str = "exactly_once"
    retained_checkpoints: int = 3
    max_records_per_epoch: int = 100_000
    checkpoint_timeout_ms: int = 10 * 60 * 1000
    tolerable_failures: int = 3
    min_pause_ms: int = 0
    chunk_size: int = 65_536
    expectations: dict[str, list[Any]] = field(default_factory=dict)
    rescale_on_change: str = "apply"
    deep_verify: bool = False
    local_recovery: bool = False
    state_memory_mb: int | None = None
    state_dir: str | None = None

    def __post_init__(self) -> None:
        validate_name("job id", self.job_id)
        check_max_parallelism(self.max_parallelism)
        check_parallelism(self.max_parallelism, self.parallelism)
        parse_checkpointing_mode(self.mode)
        for name in ("max_records_per_epoch", "chunk_size"):
            value = getattr(self, name, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise JobDefinitionError(f"{name}={value!r} is invalid: use an integer >= 1")
        if self.state_memory_mb is not None and (
            not isinstance(self.state_memory_mb, int)
            or isinstance(self.state_memory_mb, bool)
            or self.state_memory_mb < 1
        ):
            raise JobDefinitionError(
                f"state_memory_mb={self.state_memory_mb!r} is invalid: "
                "use an integer >= 1 (MiB per subtask) or None"
            )
        if self.state_dir is not None and not isinstance(self.state_dir, str | os.PathLike):
            raise JobDefinitionError(f"state_dir={self.state_dir!r} is invalid: use a directory path or None")
        if self.rescale_on_change not in ("apply", "refuse"):
            raise JobDefinitionError(
                f"rescale_on_change={self.rescale_on_change!r} is invalid: use 'apply' or 'refuse'"
            )
        self.graph = JobGraph()
        self.checkpoint_config()  # validates the numbers

    def checkpoint_config(self) -> CheckpointConfig:
        return CheckpointConfig(
            timeout_ms=self.checkpoint_timeout_ms,
            tolerable_failures=self.tolerable_failures,
            retained_checkpoints=self.retained_checkpoints,
            min_pause_ms=self.min_pause_ms,
            deep_verify=self.deep_verify,
        )

    def source(
        self,
        source: Any,
        *,
        uid: str,
        out_of_orderness_ms: int = 0,
        idleness_ms: int | None = None,
    ) -> DataStream:
        """Read a replayable source; watermarks = max event time - out_of_orderness - 1 per partition."""
        spec = SourceSpec(source, out_of_orderness_ms, idleness_ms)
        return DataStream(self, self.graph.add(Step(uid, spec, uid=uid)))


@dataclass
class DataStream:
    job: Job
    step: Step

    def _then(self, name: str, spec: StepSpec, uid: str | None = None) -> Step:
        return self.job.graph.add(Step(name, spec, uid=uid, inputs=[self.step]))

    def spark(
        self, fn: Callable[[Any], Any], *, schema: pa.Schema | None = None, name: str = "spark"
    ) -> DataStream:
        """A stateless Spark SQL stage right after a source: ``fn(df) -> DataFrame`` runs on each
        epoch's cut of the source (filters, projections, joins with any table Spark can read), on
        the driver's Spark session, before the rest of the chain. ``fn`` must be deterministic
        (same cut, same rows) and keep the source's event time column; ``schema`` (Arrow) is the
        output's, checked every epoch (None: inferred once per process). See
        ``spark_jobs.runtime.spark_stage``."""
        if not callable(fn):
            raise JobDefinitionError(
                f"spark step {name!r}: fn={fn!r} is not callable: pass fn(df) -> DataFrame"
            )
        if schema is not None and not isinstance(schema, pa.Schema):
            raise JobDefinitionError(
                f"spark step {name!r}: schema={schema!r} is not a pyarrow.Schema: "
                "pass pa.schema([...]) or None"
            )
        if not isinstance(self.step.spec, SourceSpec):
            raise JobDefinitionError(
                f"spark step {name!r} follows {self.step.describe()}: a spark step reads an epoch's cut, "
                "so call .spark(...) right after job.source(...)"
            )
        return DataStream(self.job, self._then(name, SparkSpec(fn, schema)))

    def map(self, fn: BatchFn, *, name: str = "map") -> DataStream:
        return DataStream(self.job, self._then(name, MapSpec(fn)))

    def flat_map(self, fn: BatchFn, *, name: str = "flat_map") -> DataStream:
        return DataStream(self.job, self._then(name, MapSpec(fn)))

    def filter(self, fn: MaskFn, *, name: str = "filter") -> DataStream:
        return DataStream(self.job, self._then(name, FilterSpec(fn)))

    def async_enrich(
        self,
        fn: Any,
        *,
        ordered: bool = True,
        capacity: int = 100,
        timeout_ms: int = 5_000,
        on_timeout: str = "side_output",
        name: str = "async_enrich",
    ) -> DataStream:
        """Call ``async def fn(row) -> row | None`` per record with bounded concurrency (Flink's
        async I/O); ``ordered`` keeps input order, else results leave as they complete (never
        across a watermark). Timeouts go to the ``async-timeout`` side output or fail the epoch."""
        spec = AsyncSpec(fn, ordered, capacity, timeout_ms, on_timeout)
        return DataStream(self.job, self._then(name, spec))

    def key_by(self, key: KeySpec, *, name: str | None = None) -> KeyedStream:
        label = name or (key if isinstance(key, str) else "key_by")
        return KeyedStream(self.job, self._then(f"key_by({label})", KeyBySpec(key)))

    def sink(self, sink: Any, *, uid: str) -> None:
        self._then(uid, SinkSpec(sink), uid)


@dataclass
class KeyedStream(DataStream):
    @property
    def key_spec(self) -> KeyBySpec:
        """The key_by step this stream starts with."""
        spec = self.step.spec
        assert isinstance(spec, KeyBySpec), "a KeyedStream starts with its key_by step"
        return spec

    def process(self, fn: Any, *, uid: str) -> DataStream:
        """Run a KeyedProcessFunction (keyed state + timers, one call per key and chunk) or a
        BatchProcessFunction (state and timers as columns, one call per chunk)."""
        return DataStream(self.job, self._then(uid, ProcessSpec(fn), uid))

    def window(
        self,
        assigner: Any,
        aggregate: Any,
        *,
        uid: str,
        allowed_lateness_ms: int = 0,
        late_output: Any = None,
    ) -> DataStream:
        """Event-time windows with an incremental aggregate; records later than the watermark plus
        ``allowed_lateness_ms`` go to ``late_output`` (a sink) or are counted and dropped."""
        spec = WindowSpec(assigner, aggregate, allowed_lateness_ms, late_output)
        return DataStream(self.job, self._then(uid, spec, uid))

    def connect(self, other: KeyedStream) -> ConnectedStreams:
        """Two keyed streams whose keys share one domain, processed together by a
        CoProcessFunction with shared keyed state (the combined watermark is the min of both)."""
        if other.job is not self.job:
            raise JobDefinitionError("connect() needs two streams of the same job")
        return ConnectedStreams(self, other)

    def deduplicate(self, *, ttl_ms: int, uid: str) -> DataStream:
        """Keep the first record per key; a key is forgotten ``ttl_ms`` after it was first seen."""
        return DataStream(self.job, self._then(uid, DedupSpec(ttl_ms), uid))


@dataclass
class ConnectedStreams:
    first: KeyedStream
    second: KeyedStream

    def process(self, fn: Any, *, uid: str) -> DataStream:
        job, graph = self.first.job, self.first.job.graph
        if job.mode == "unaligned":
            raise JobDefinitionError(
                f"connect step {uid!r}: unaligned checkpoints of two-input steps are not supported yet; "
                "use mode='exactly_once' or 'at_least_once'"
            )
        keys = (self.first.key_spec.key, self.second.key_spec.key)
        inputs = [self.first.step.inputs[0], self.second.step.inputs[0]]
        graph.steps.remove(self.first.step)  # the exchange is the connect step itself
        graph.steps.remove(self.second.step)
        return DataStream(job, graph.add(Step(uid, ConnectSpec(keys, fn), uid=uid, inputs=inputs)))
