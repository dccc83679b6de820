"""The job graph: steps with stable uids, compiled into stages separated by key exchanges.

A pipeline is a chain of steps. ``key_by`` starts a new *stage*: records are routed to the subtask
that owns their key group (one shuffle), exactly as Flink's keyBy is a network exchange. Every
other step is chained into the stage it follows (Flink's operator chaining)::

    source(s) -> map/filter/... | key_by -> window/process/dedup -> map | key_by -> process -> sink
    `-------- stage 0 ---------'  `------------ stage 1 ------------'   `------ stage 2 -------'

Invariants checked by :meth:`JobGraph.validate` (each a one-line error naming the step and the fix):
  * every stateful step and every source and sink has a ``uid``; uids are unique and valid names;
  * keyed steps (process, window, deduplicate) follow a ``key_by``;
  * the graph ends in at least one sink;
  * the operators of a stage form one chain; any number of sinks may tap the output of any step of
    it (fan-out to sinks: each sink receives every row that step emits), except the source step of
    a stage with a ``.spark`` step (the epoch reads only the spark step's rows);
  * uids, the late outputs' ``<window uid>-late`` included, are unique;
  * a key_by or connect reads the end of its input stage's chain, and nothing is chained after a
    step whose output already feeds one (the exchange would read another step's rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from spark_jobs.api.specs import (
    ConnectSpec,
    KeyBySpec,
    SideOutput,
    SinkSpec,
    SourceSpec,
    SparkSpec,
    StepSpec,
)
from state_store.core.layout import InvalidNameError, validate_name

S = TypeVar("S", bound=StepSpec)


class JobDefinitionError(ValueError):
    """A pipeline that cannot run; the message names the step and what to change."""


@dataclass
class Step:
    """One node of the graph. ``spec`` says what it is (``spark_jobs.api.specs``, one frozen type
    per kind); ``kind``, ``stateful`` and ``keyed`` are the spec's, never set on the step."""

    name: str
    spec: StepSpec
    uid: str | None = None
    inputs: list[Step] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.spec.kind

    def describe(self) -> str:
        return f"{self.kind} step {self.name!r}" + (f" (uid {self.uid!r})" if self.uid else "")

    @property
    def stateful(self) -> bool:
        """The step has a uid and acknowledges every checkpoint (sources, sinks, keyed steps)."""
        return self.spec.stateful

    def side_outputs(self) -> tuple[SideOutput, ...]:
        """The step's outputs routed to sinks of their own (a window's late data)."""
        return self.spec.side_outputs(self.uid or self.name)

    @property
    def keyed(self) -> bool:
        """The step needs keyed input: a key_by (or connect) before it in its stage."""
        return self.spec.keyed


@dataclass
class Stage:
    """Steps run by one subtask between two exchanges. ``key`` is the stage's key column/function
    (None for the source stage); ``inputs`` are the upstream stages feeding its channels."""

    index: int
    key: str | Callable[..., Any] | None
    steps: list[Step]
    inputs: list[int]
    input_keys: list[Any] = field(default_factory=list)

    @property
    def stateful_uids(self) -> list[str]:
        return [s.uid for s in self.steps if s.stateful and s.uid]

    @property
    def source_spec(self) -> SourceSpec:
        """The source a source stage reads (its first step)."""
        spec = self.steps[0].spec
        if not isinstance(spec, SourceSpec):
            raise ValueError(f"stage {self.index} starts with {self.steps[0].describe()}, not a source")
        return spec


@dataclass
class JobGraph:
    steps: list[Step] = field(default_factory=list)

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def steps_of(self, spec_type: type[S]) -> list[tuple[Step, S]]:
        """The steps whose spec is a ``spec_type``, each with its spec (typed)."""
        found: list[tuple[Step, S]] = []
        for step in self.steps:
            if isinstance(step.spec, spec_type):
                found.append((step, step.spec))
        return found

    @property
    def sources(self) -> list[Step]:
        return [step for step, _ in self.steps_of(SourceSpec)]

    @property
    def sinks(self) -> list[Step]:
        return [step for step, _ in self.steps_of(SinkSpec)]

    def validate(self) -> None:
        seen: dict[str, str] = {}
        for step in self.steps:
            if step.stateful and not step.uid:
                raise JobDefinitionError(
                    f"{step.describe()} is stateful and has no uid: pass uid='...' so its state "
                    "survives upgrades and restores"
                )
            owned = [(step.uid, step.describe())] if step.uid else []
            owned += [(o.uid, f"the {o.tag} output of {step.describe()}") for o in step.side_outputs()]
            for uid, owner in owned:
                try:
                    validate_name("operator uid", uid)
                except InvalidNameError as exc:
                    raise JobDefinitionError(str(exc)) from None
                if uid in seen:
                    raise JobDefinitionError(
                        f"uid {uid!r} is used by both {seen[uid]} and {owner}: uids must be unique "
                        "(a window's late output is acknowledged as '<window uid>-late')"
                    )
                seen[uid] = owner
        if not self.sinks:
            raise JobDefinitionError("the job has no sink: add .sink(..., uid='...') to the pipeline")
        if not self.sources:
            raise JobDefinitionError("the job has no source: start it with job.source(..., uid='...')")

    def stages(self) -> list[Stage]:
        """Compile the steps into stages (see module docstring); validates first."""
        self.validate()
        stage_of: dict[int, Stage] = {}
        stages: list[Stage] = []
        for step in self.steps:
            spec = step.spec
            if isinstance(spec, SourceSpec):
                stage = Stage(len(stages), None, [step], [])
                stages.append(stage)
            elif isinstance(spec, KeyBySpec):
                _check_exchange_input(step, step.inputs[0], stage_of[id(step.inputs[0])])
                upstream = [stage_of[id(step.inputs[0])].index]
                if any(upstream[0] in other.inputs for other in stages):
                    raise JobDefinitionError(
                        f"{step.describe()} is the second exchange out of the same stage: one stage feeds at "
                        "most one key_by or connect; key once and branch to sinks, or run two jobs"
                    )
                stage = Stage(len(stages), spec.key, [step], upstream, [spec.key])
                stages.append(stage)
            elif isinstance(spec, ConnectSpec):
                for parent in step.inputs:
                    _check_exchange_input(step, parent, stage_of[id(parent)])
                upstream = [stage_of[id(i)].index for i in step.inputs]
                if len(set(upstream)) != len(upstream):
                    raise JobDefinitionError(
                        f"{step.describe()} connects two streams of the same stage: connect streams that "
                        "come from different sources or key_by steps"
                    )
                if any(index in other.inputs for index in upstream for other in stages):
                    raise JobDefinitionError(
                        f"{step.describe()} reads a stage that already feeds another key_by or connect: one "
                        "stage feeds at most one exchange; branch to sinks only, or run two jobs"
                    )
                stage = Stage(len(stages), spec.keys[0], [step], upstream, list(spec.keys))
                stages.append(stage)
            else:
                (parent,) = step.inputs
                stage = stage_of[id(parent)]
                chain_end = _chain_end(stage)
                if not isinstance(spec, SinkSpec) and parent is not chain_end:
                    raise JobDefinitionError(
                        f"{step.describe()} branches off {parent.describe()}, which already feeds "
                        f"{chain_end.describe()}: only sinks may branch off a step (a tap); chain the "
                        "step after the last one, or start another branch with .key_by(...)"
                    )
                if not isinstance(spec, SinkSpec) and any(stage.index in other.inputs for other in stages):
                    raise JobDefinitionError(
                        f"{step.describe()} follows {parent.describe()}, whose output already feeds a "
                        "key_by or connect: the exchange reads the end of the chain, so the step would "
                        "change what it receives; define the step before the .key_by(...), or tap "
                        f"{parent.describe()} with a sink only"
                    )
                _check_spark_tap(step, parent, stage)
                stage.steps.append(step)
            stage_of[id(step)] = stage
            if step.keyed and stage.key is None:
                raise JobDefinitionError(f"{step.describe()} needs keyed input: call .key_by(...) before it")
        return stages


def _chain_end(stage: Stage) -> Step:
    """The last step of the stage's chain that is not a sink (what an exchange out of it reads)."""
    return [s for s in stage.steps if not isinstance(s.spec, SinkSpec)][-1]


def _check_exchange_input(step: Step, parent: Step, stage: Stage) -> None:
    """A key_by or connect reads the end of its input stage's chain, never a step inside it."""
    end = _chain_end(stage)
    if parent is not end:
        raise JobDefinitionError(
            f"{step.describe()} branches off {parent.describe()}, which already feeds "
            f"{end.describe()}: an exchange reads the end of a chain; key the output of "
            f"{end.describe()}, or move the other steps after the key_by"
        )


def _check_spark_tap(step: Step, parent: Step, stage: Stage) -> None:
    """A source stage's subtasks read the output of its ``.spark`` step, never the source's own
    rows: a sink cannot tap the source step of a stage with a spark step."""
    source = stage.steps[0]
    tapped = any(isinstance(s.spec, SinkSpec) and s.inputs[0] is source for s in stage.steps)
    if isinstance(step.spec, SparkSpec) and tapped:
        raise JobDefinitionError(
            f"{step.describe()} follows {source.describe()}, which a sink already taps: the sink would "
            "receive the spark step's rows, not the source's; tap the spark step's output instead"
        )
    if (
        isinstance(step.spec, SinkSpec)
        and parent is source
        and any(isinstance(s.spec, SparkSpec) for s in stage.steps)
    ):
        raise JobDefinitionError(
            f"{step.describe()} taps {source.describe()}, which feeds a spark step: the epoch reads "
            "only the spark step's rows, so tap the spark step's output instead"
        )
