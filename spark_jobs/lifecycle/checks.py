"""Validation of snapshots (Great Expectations, ``state_store.validation``) and quarantine.

``validate_checkpoint`` builds the frames the built-in suite needs from a completed checkpoint --
every state entry with its key group and the key group its key hashes to, pending timers, source
positions (against the previous completed checkpoint) -- runs the suite, saves the result next to
the checkpoint (``chk-n/_validation.json``) and, when it fails, quarantines the checkpoint
(``chk-n/_quarantined.json``): automatic restore then skips it for the previous good checkpoint.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.specs import SourceSpec, WindowSpec
from spark_jobs.lifecycle.snapshots import Snapshot, from_checkpoint
from spark_jobs.runtime.cycle import sink_specs
from spark_jobs.sinks import read_committed
from state_store.core import documents
from state_store.core.completed import completed_ids, load_completed
from state_store.core.keygroups import key_group_of
from state_store.core.layout import JobLayout
from state_store.core.manifests import QuarantineRecord
from state_store.core.ports import Clock, ObjectStore
from state_store.formats.json_codec import key_to_json
from state_store.validation import ValidationResult, save_result, validate_sink_output, validate_snapshot


def state_frame(snapshot: Snapshot) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for uid, op in snapshot.operators.items():
        if op.keyed is None:
            continue
        for kg, states in op.keyed.key_groups.items():
            for name, entries in states.items():
                kind = op.keyed.kinds[name].value
                for row in entries:
                    rows.append(
                        {
                            "operator": uid,
                            "key_group": kg,
                            "state": name,
                            "kind": kind,
                            "key": key_to_json(row.key),
                            "namespace": key_to_json(row.namespace),
                            "key_hash_group": key_group_of(row.key, snapshot.max_parallelism),
                        }
                    )
    return pd.DataFrame(
        rows, columns=["operator", "key_group", "state", "kind", "key", "namespace", "key_hash_group"]
    )


def timers_frame(snapshot: Snapshot) -> pd.DataFrame:
    rows = [
        {
            "operator": uid,
            "key_group": kg,
            "key": key_to_json(k),
            "namespace": key_to_json(ns),
            "timestamp": ts,
            "domain": domain,
            "key_hash_group": key_group_of(k, snapshot.max_parallelism),
        }
        for uid, op in snapshot.operators.items()
        for kg, domains in op.timers.items()
        for domain, entries in domains.items()
        for ts, k, ns in entries
    ]
    columns = ["operator", "key_group", "key", "namespace", "timestamp", "domain", "key_hash_group"]
    return pd.DataFrame(rows, columns=columns)


def watermarks(job: Job, snapshot: Snapshot) -> dict[str, int] | None:
    """The lowest watermark any operator can have seen (min over source partitions of
    max_ts - out_of_orderness - 1), less each window's allowed lateness."""
    bounds = {step.uid: spec.watermark_lag_ms for step, spec in job.graph.steps_of(SourceSpec)}
    marks = [
        int(e["max_ts"]) - bounds.get(uid, 0) - 1
        for uid, entries in snapshot.sources.items()
        for e in entries
        if e.get("max_ts") is not None
    ]
    if not marks or any(e.get("max_ts") is None for entries in snapshot.sources.values() for e in entries):
        return None
    low = min(marks)
    lateness = {step.uid: int(spec.allowed_lateness_ms or 0) for step, spec in job.graph.steps_of(WindowSpec)}
    return {uid: low - lateness.get(uid, 0) for uid in snapshot.operators}


def validate_snapshot_of(
    job: Job, snapshot: Snapshot, previous: dict[str, int] | None = None
) -> ValidationResult:
    """The built-in suite (plus the job's per-operator expectations) over one snapshot."""
    return validate_snapshot(
        state_frame(snapshot),
        max_parallelism=job.max_parallelism,
        positions=snapshot.positions,
        previous_positions=previous,
        timers=timers_frame(snapshot),
        watermark=watermarks(job, snapshot),
        user_expectations=job.expectations or None,
    )


def validate_checkpoint(
    job: Job, store: ObjectStore, checkpoint_id: int, clock: Clock, *, quarantine: bool = True
) -> ValidationResult:
    layout = JobLayout(job.job_id)
    snapshot = from_checkpoint(store, job.job_id, checkpoint_id, job.max_parallelism)
    earlier = [i for i in completed_ids(store, layout) if i < checkpoint_id]
    previous = None
    for candidate in reversed(earlier):
        try:
            meta = load_completed(store, layout, candidate).metadata
        except Exception:
            continue
        if not meta.properties.savepoint:
            previous = {k: int(v[1]) for k, v in meta.positions.get("ranges", {}).items()}
            break
    result = validate_snapshot_of(job, snapshot, previous)
    checks = list(result.checks)
    for uid, spec in sink_specs(job).items():
        key = tuple(getattr(spec, "unique_key", ()))
        if key and isinstance(spec, ParquetSink):  # a Delta table's merge keeps its keys unique itself
            frame = read_committed(store, job.job_id, uid, up_to=checkpoint_id).to_pandas()
            sink = validate_sink_output(frame, list(key), suite_name=f"sink {uid}")
            checks.extend(replace(c, name=f"sink:{uid}:{c.name}") for c in sink.checks)
    result = ValidationResult.of("checkpoint", checks)
    save_result(store, layout.checkpoint_dir(checkpoint_id) + "_validation.json", result)
    if not result.passed and quarantine:
        record = QuarantineRecord(checkpoint_id, result.summary_line(), clock.now_ms())
        documents.create(store, layout.quarantined(checkpoint_id), record)
    return result
