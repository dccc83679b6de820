"""A deferrable trigger that fires once a job's lease can be taken by a holder.

An Epochal task whose job is busy (another actor holds the job's lease: an epoch run, a restore, a
savepoint) defers instead of failing: no worker slot is held while it waits. The trigger polls the
job record every ``poll_interval`` seconds in the triggerer (off the event loop) and fires when the
lease is free, expired, or one ``holder`` may take over (``state_store.lease_keeper.takeover_rule``);
the task then resumes in ``execute`` and acquires the lease (deferring again if it lost a race).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


def lease_available(store_uri: str, job_id: str, holder: str) -> dict[str, Any] | None:
    """None while another actor holds the lease; else what was found (blocking I/O)."""
    from state_store.clocks import SystemClock
    from state_store.core.jobrecord import JobRecords
    from state_store.core.lease import describe
    from state_store.lease_keeper import takeover_rule
    from state_store.storage import open_store

    record = JobRecords(open_store(store_uri), job_id).read()
    lease = None if record is None else record.lease
    if lease is None:
        return {"job_id": job_id, "free": True, "previous": ""}
    if lease.holder == holder or lease.expires_ms < SystemClock().now_ms() or takeover_rule(holder)(lease):
        return {"job_id": job_id, "free": True, "previous": describe(lease)}
    return None


class LeaseFreeTrigger(BaseTrigger):
    def __init__(self, store_uri: str, job_id: str, holder: str, poll_interval: float = 5.0) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.store_uri, self.job_id, self.holder = store_uri, job_id, holder
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "epochal_airflow.triggers.lease.LeaseFreeTrigger",
            {
                "store_uri": self.store_uri,
                "job_id": self.job_id,
                "holder": self.holder,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            found = await asyncio.to_thread(lease_available, self.store_uri, self.job_id, self.holder)
            if found is not None:
                yield TriggerEvent(found)  # type: ignore[no-untyped-call]
                return
            await asyncio.sleep(self.poll_interval)
