"""S6: completing a checkpoint with many acks against a real SeaweedFS S3 server (loopback).

Each ack names one small state file (as a keyed subtask's ack does); files and acks are written
before the clock starts, and with ``bundled`` the acks are also written as one ack bundle, as an
epoch run's driver does after its tasks finished (``state_store.core.ack_bundles``).
Timed: ``CheckpointCoordinator.complete`` (list acks, read them, check every referenced file --
presence and size from the folder listings by default; with ``deep_verify`` every file read back
and checked against its writer's checksum -- write ``_metadata.json``, the decision, move LATEST).
S3 requests are counted with botocore's ``before-call`` event on the store's client, by operation.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

from state_store.core.ack_bundles import write_ack_bundle
from state_store.core.config import CheckpointConfig
from state_store.core.coordinator import CheckpointCoordinator
from state_store.core.manifests import AckRecord, TaskId
from state_store.core.responder import TaskCheckpointResponder
from state_store.testing import ManualClock
from state_store.testing.seaweedfs import SeaweedFSServer


def run(acks: int, repeats: int = 3, *, deep_verify: bool = False, bundled: bool = True) -> dict[str, Any]:
    if acks < 1:
        raise ValueError(f"--keys {acks} (the number of acks for s6) is invalid: use >= 1")
    server = SeaweedFSServer().start()
    try:
        store = server.make_store("epochal-bench", f"s6-{uuid.uuid4().hex[:8]}")
        calls: Counter[str] = Counter()

        def count(model: Any, **_: Any) -> None:
            calls[model.name] += 1

        store._client.meta.events.register("before-call.s3", count)
        clock = ManualClock(1_000_000)
        config = CheckpointConfig(deep_verify=deep_verify)
        coordinator = CheckpointCoordinator(store, "s6", config=config, clock=clock, max_parallelism=32768)
        tasks = [TaskId("op", i) for i in range(acks)]
        runs = []
        for r in range(repeats):
            clock.advance(1_000)
            pending = coordinator.trigger(tasks, positions={})
            n = pending.checkpoint_id
            attempt = coordinator.start_attempt(n).attempt
            responder = TaskCheckpointResponder(store, "s6")
            for task in tasks:
                handle = responder.upload_shared("op", f"state of {task.subtask} in run {r}".encode())
                responder.acknowledge(AckRecord(n, task, pending.generation, attempt, (handle,)))
            if bundled:
                write_ack_bundle(
                    store, coordinator.layout, n, pending.generation, attempt, responder.receipts
                )
            calls.clear()
            began = time.perf_counter()
            result = coordinator.complete(n)
            seconds = time.perf_counter() - began
            if result.status != "completed":
                raise RuntimeError(f"checkpoint {n} {result.status}: {result.message}")
            runs.append(
                {
                    "checkpoint_id": n,
                    "seconds": seconds,
                    "requests": sum(calls.values()),
                    "by_operation": dict(calls),
                }
            )
        return {"acks": acks, "deep_verify": deep_verify, "bundled": bundled, "runs": runs}
    finally:
        server.stop(grace_s=1)
