"""A deferrable trigger that fires once checkpoint n of a job is decided (completed or aborted).

It polls the checkpoint's status (``CheckpointStatus``, as the history and monitoring read it) every
``poll_interval`` seconds in the triggerer, off the event loop; the event carries
``{"checkpoint_id", "status": "completed" | "aborted" | "unreadable", "reason"}`` (``completing`` is
not an end: the trigger keeps waiting).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


def checkpoint_status(store_uri: str, job_id: str, checkpoint_id: int) -> dict[str, Any] | None:
    """None while undecided; else the decision (blocking I/O: call from a thread). Read through the
    job's one status model (``state_store.core.history.checkpoint_summary``)."""
    from state_store.core import CheckpointStatus
    from state_store.core.history import checkpoint_summary
    from state_store.storage import open_store

    summary = checkpoint_summary(open_store(store_uri), job_id, checkpoint_id)
    if summary is None or summary.status is CheckpointStatus.IN_PROGRESS:
        return None
    return {"checkpoint_id": checkpoint_id, "status": str(summary.status), "reason": summary.reason}


class CheckpointDecidedTrigger(BaseTrigger):
    def __init__(self, store_uri: str, job_id: str, checkpoint_id: int, poll_interval: float = 5.0) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.store_uri, self.job_id, self.checkpoint_id = store_uri, job_id, checkpoint_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "epochal_airflow.triggers.checkpoint.CheckpointDecidedTrigger",
            {
                "store_uri": self.store_uri,
                "job_id": self.job_id,
                "checkpoint_id": self.checkpoint_id,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            status = await asyncio.to_thread(
                checkpoint_status, self.store_uri, self.job_id, self.checkpoint_id
            )
            if status is not None and status["status"] != "completing":
                yield TriggerEvent(status)  # type: ignore[no-untyped-call]
                return
            await asyncio.sleep(self.poll_interval)
