"""The runtime operator of a step: one builder per spec type (``spark_jobs.api.specs``), looked up
by the spec's type.

A spec type maps to its builder, or to ``None`` when the step is no operator of the chain: a source
is read by its source subtask, a spark step runs on the driver before it, a key_by is the exchange
in front of a stage, a sink is written at the end of the chain (``spark_jobs.runtime.chain``).

Invariants: every spec type of ``STEP_SPECS`` has an entry (``tests/unit/runtime/test_specs.py``);
a spec type without one is an error when the chain is built, never a step silently skipped; a
builder reads only its spec and the site, and does no I/O (state is restored after building).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from spark_jobs.api import specs
from spark_jobs.api.functions import BatchProcessFunction
from spark_jobs.api.graph import Stage, Step
from spark_jobs.runtime.keys import KeySpec
from spark_jobs.runtime.operators.async_io import AsyncEnrichOperator
from spark_jobs.runtime.operators.base import FilterOperator, MapOperator, Operator
from spark_jobs.runtime.operators.batch_process import BatchProcessOperator
from spark_jobs.runtime.operators.dedup import DeduplicateOperator
from spark_jobs.runtime.operators.process import CoProcessOperator, ProcessOperator
from spark_jobs.runtime.operators.window import WindowOperator


@dataclass(frozen=True, slots=True)
class OperatorSite:
    """Where a step's operator runs: the step's uid and its stage's keys (``key`` is the stage's
    key, ``input_keys`` one per input of a two-input stage)."""

    uid: str | None
    key: KeySpec | None
    input_keys: tuple[KeySpec, ...] = ()

    @classmethod
    def of(cls, stage: Stage, step: Step) -> OperatorSite:
        return cls(step.uid, stage.key, tuple(stage.input_keys))

    def keyed(self) -> tuple[str, KeySpec]:
        """The uid and key of a keyed step (``JobGraph.validate`` guarantees both)."""
        if self.uid is None or self.key is None:
            raise ValueError("a keyed step needs a uid and a key_by before it: validate the job graph")
        return self.uid, self.key


Builder = Callable[[Any, OperatorSite], Operator]


def _map(spec: specs.MapSpec, site: OperatorSite) -> Operator:
    return MapOperator(spec.fn)


def _filter(spec: specs.FilterSpec, site: OperatorSite) -> Operator:
    return FilterOperator(spec.fn)


def _async(spec: specs.AsyncSpec, site: OperatorSite) -> Operator:
    return AsyncEnrichOperator(
        spec.fn,
        ordered=spec.ordered,
        capacity=spec.capacity,
        timeout_ms=spec.timeout_ms,
        on_timeout=spec.on_timeout,
    )


def _window(spec: specs.WindowSpec, site: OperatorSite) -> Operator:
    uid, key = site.keyed()
    return WindowOperator(uid, key, spec.assigner, spec.aggregate, spec.allowed_lateness_ms)


def _dedup(spec: specs.DedupSpec, site: OperatorSite) -> Operator:
    uid, key = site.keyed()
    return DeduplicateOperator(uid, key, spec.ttl_ms)


def _process(spec: specs.ProcessSpec, site: OperatorSite) -> Operator:
    uid, key = site.keyed()
    if isinstance(spec.fn, BatchProcessFunction):
        return BatchProcessOperator(uid, key, spec.fn)
    return ProcessOperator(uid, key, spec.fn)


def _connect(spec: specs.ConnectSpec, site: OperatorSite) -> Operator:
    uid, _ = site.keyed()
    return CoProcessOperator(uid, list(site.input_keys), spec.fn)


BUILDERS: Mapping[type[specs.StepSpec], Builder | None] = MappingProxyType(
    {
        specs.SourceSpec: None,
        specs.SparkSpec: None,  # run by the driver before the source subtasks (runtime/spark_stage.py)
        specs.KeyBySpec: None,
        specs.SinkSpec: None,
        specs.MapSpec: _map,
        specs.FilterSpec: _filter,
        specs.AsyncSpec: _async,
        specs.WindowSpec: _window,
        specs.DedupSpec: _dedup,
        specs.ProcessSpec: _process,
        specs.ConnectSpec: _connect,
    }
)


def build_operator(spec: specs.StepSpec, site: OperatorSite) -> Operator | None:
    """The operator of a step with this spec, or None when the step is no operator of the chain."""
    try:
        build = BUILDERS[type(spec)]
    except KeyError:
        raise TypeError(
            f"no operator builder for {type(spec).__name__}: add one to {__name__}.BUILDERS"
        ) from None
    return None if build is None else build(spec, site)


def builds_operator(spec: specs.StepSpec) -> bool:
    """The step is an operator of its stage's chain (sources, key_by, spark steps and sinks are not)."""
    return BUILDERS.get(type(spec)) is not None


def build_chain_operators(stage: Stage) -> list[Operator]:
    """The operators of a stage's chain, in step order."""
    built = (build_operator(step.spec, OperatorSite.of(stage, step)) for step in stage.steps)
    return [op for op in built if op is not None]
