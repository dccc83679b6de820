"""Pydantic response models of the REST API (they are its OpenAPI schema); each mirrors the
``to_json`` of a :mod:`state_store.monitoring.model` value."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Checkpoint(Strict):
    checkpoint_id: int = Field(ge=1)
    status: str = Field(description="completed | failed | in_progress | completing | unreadable")
    trigger_ms: int
    end_ms: int | None
    duration_ms: int | None = Field(description="end-to-end: trigger to completion or abort")
    acked: int = Field(ge=0)
    expected: int = Field(ge=0)
    state_size: int = Field(ge=0, description="bytes of every state file the checkpoint references")
    incremental_size: int = Field(ge=0, description="bytes uploaded by this checkpoint")
    alignment_ms: int | None
    savepoint: bool
    generation: int
    run_id: str = Field(description="the Airflow DAG run that triggered it ('' outside Airflow)")
    validation: str = Field(description="passed | failed | quarantined | not_run")
    validation_detail: str
    reason: str
    restored_from: str


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


class Summary(Strict):
    count: int
    min: float | None
    avg: float | None
    p50: float | None
    p99: float | None
    max: float | None


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


class Subtask(Strict):
    subtask: int
    status: str = Field(description="acked | declined | pending")
    attempt: int
    state_size: int
    bytes_written: int
    files: int
    metrics: dict[str, Any]
    reason: str


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


class Error(Strict):
    detail: str
