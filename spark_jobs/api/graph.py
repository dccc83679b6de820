"""The job graph: steps with stable uids, compiled into stages separated by key exchanges.

A pipeline is a chain of steps. ``key_by`` starts a new *stage*: records are routed to the subtask
that owns their key group (one shuffle), exactly as Flink's keyBy is a network exchange. Every
other step is chained into the stage it follows (Flink's operator chaining)::

    source(s) -> map/filter/... | key_by -> window/process/dedup -> map | key_by -> process -> sink
    `-------- stage 0 ---------'  `------------ stage 1 ------------'   `------ stage 2 -------'

Invariants checked by :meth:`JobGraph.validate` (each a one-line error naming the step and the fix):
  * every stateful step and every source and sink has a ``uid``; uids are unique and valid names;
  * keyed steps (process, window, deduplicate) follow a ``key_by``;
  * the graph ends in at least one sink.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from state_store.core.layout import InvalidNameError, validate_name


class JobDefinitionError(ValueError):
    """A pipeline that cannot run; the message names the step and what to change."""


@dataclass
class Step:
    """One node of the graph. ``kind`` selects the runtime operator; ``spec`` holds its arguments."""

    kind: str
    name: str
    spec: dict[str, Any] = field(default_factory=dict)
    uid: str | None = None
    inputs: list[Step] = field(default_factory=list)
    stateful: bool = False
    keyed: bool = False

    def describe(self) -> str:
        return f"{self.kind} step {self.name!r}" + (f" (uid {self.uid!r})" if self.uid else "")


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


@dataclass
class JobGraph:
    steps: list[Step] = field(default_factory=list)

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    @property
    def sources(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "source"]

    @property
    def sinks(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "sink"]

    def validate(self) -> None:
        seen: dict[str, Step] = {}
        for step in self.steps:
            needs_uid = step.stateful or step.kind in ("source", "sink")
            if needs_uid and not step.uid:
                raise JobDefinitionError(
                    f"{step.describe()} is stateful and has no uid: pass uid='...' so its state "
                    "survives upgrades and restores"
                )
            if step.uid:
                try:
                    validate_name("operator uid", step.uid)
                except InvalidNameError as exc:
                    raise JobDefinitionError(str(exc)) from None
                if step.uid in seen:
                    raise JobDefinitionError(
                        f"uid {step.uid!r} is used by both {seen[step.uid].describe()} and "
                        f"{step.describe()}: uids must be unique"
                    )
                seen[step.uid] = step
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
            if step.kind == "source":
                stage = Stage(len(stages), None, [step], [])
                stages.append(stage)
            elif step.kind == "key_by":
                upstream = [stage_of[id(step.inputs[0])].index]
                stage = Stage(len(stages), step.spec["key"], [step], upstream, [step.spec["key"]])
                stages.append(stage)
            elif step.kind == "connect":
                upstream = [stage_of[id(i)].index for i in step.inputs]
                if len(set(upstream)) != len(upstream):
                    raise JobDefinitionError(
                        f"{step.describe()} connects two streams of the same stage: connect streams that "
                        "come from different sources or key_by steps"
                    )
                keys = step.spec["keys"]
                stage = Stage(len(stages), keys[0], [step], upstream, list(keys))
                stages.append(stage)
            else:
                (parent,) = step.inputs
                stage = stage_of[id(parent)]
                if parent is not stage.steps[-1]:
                    raise JobDefinitionError(
                        f"{step.describe()} branches off {parent.describe()}: fan-out inside a stage is "
                        "not supported yet; add the step to the end of the chain"
                    )
                stage.steps.append(step)
            stage_of[id(step)] = stage
            if step.keyed and stage.key is None:
                raise JobDefinitionError(f"{step.describe()} needs keyed input: call .key_by(...) before it")
        return stages
