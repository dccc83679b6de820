"""Pydantic response models of the REST API (they are its OpenAPI schema). The row models
(checkpoint, summary, subtask) are built from the :mod:`state_store.monitoring.model` dataclasses
whose ``to_json`` they describe (:func:`model_of`); the envelopes around them are written here."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from state_store.monitoring import model


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def model_of(cls: type, name: str) -> type[Strict]:
    """The response model of a monitoring row dataclass: its fields (every one required: ``to_json``
    always writes it) with the ``doc`` and bounds of their ``metadata``, then the properties of its
    ``COMPUTED`` (type from the annotation, description from the first line of the docstring)."""
    hints = typing.get_type_hints(cls)
    spec: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        meta = dict(f.metadata)
        spec[f.name] = (hints[f.name], Field(..., description=meta.pop("doc", None), **meta))
    for prop_name in getattr(cls, "COMPUTED", ()):
        getter = getattr(cls, prop_name).fget
        doc = (getter.__doc__ or "").strip().split(".")[0]
        spec[prop_name] = (typing.get_type_hints(getter)["return"], Field(..., description=doc or None))
    model: type[Strict] = create_model(name, __base__=Strict, **spec)
    return model


if typing.TYPE_CHECKING:  # built at run time; to a type checker a strict model like the others
    Checkpoint = Strict
else:
    Checkpoint = model_of(model.CheckpointRow, "Checkpoint")


class Counts(Strict):
    triggered: int
    in_progress: int
    completing: int
    completed: int
    failed: int
    unreadable: int
    restored: int


class Overview(Strict):
    job_id: str
    counts: Counts
    highest_id: int
    generation: int
    latest_completed: Checkpoint | None
    latest_savepoint: Checkpoint | None
    latest_failure: Checkpoint | None
    latest_restore: Checkpoint | None


if typing.TYPE_CHECKING:  # built at run time; to a type checker a strict model like the others
    Summary = Strict
else:
    Summary = model_of(model.SummaryStats, "Summary")


class Summaries(Strict):
    duration_ms: Summary
    state_size: Summary
    incremental_size: Summary


class JobOverview(Strict):
    overview: Overview
    summary: Summaries
    dag_id: str


class CheckpointPage(Strict):
    job_id: str
    total: int = Field(description="checkpoints matching the status filter")
    offset: int
    limit: int
    status: str | None
    checkpoints: list[Checkpoint]


if typing.TYPE_CHECKING:  # built at run time; to a type checker a strict model like the others
    Subtask = Strict
else:
    Subtask = model_of(model.SubtaskDetail, "Subtask")


class Operator(Strict):
    uid: str
    acked: int
    expected: int
    state_size: int
    bytes_written: int
    subtasks: list[Subtask]


class CheckpointDetail(Strict):
    checkpoint: Checkpoint
    attempt: int
    operators: list[Operator]
    positions: dict[str, Any]


class Configuration(Strict):
    job_id: str
    storage: dict[str, Any] = Field(
        description="what the job's storage root says (job record, LATEST, triggers)"
    )
    declared: dict[str, Any] = Field(description="the job definition's checkpoint config, if it is loadable")


class Jobs(Strict):
    jobs: list[str]
    broken: dict[str, str] = {}
    """Job references that do not load -> the one-line error and remedy."""


class Error(Strict):
    detail: str


class Savepoint(Strict):
    name: str
    location: str = Field(
        description="the URI epochal_restore (source) and epochal_backfill (savepoint) take"
    )
    checkpoint_id: int | None = Field(description="the checkpoint it was taken as")
    created_ms: int | None
    format: str
    error: str = Field(description="why its manifest does not decode ('' when it does)")


class Savepoints(Strict):
    job_id: str
    savepoints: list[Savepoint]
