"""An event trigger that watches a landing zone and fires when files arrive that no epoch has read.

Bound to the Asset of a ``PrefixSource`` through an ``AssetWatcher`` (``dag_factory.source_asset``
with ``EPOCHAL_SCHEDULE=assets``): the triggerer runs :meth:`NewLandingFilesTrigger.run` for as long
as the DAG exists; each event becomes an asset event and the scheduler queues an epoch.

Rules (each proven in ``tests/unit/airflow/test_landing_watch.py``):
  * *unread* = settled files the source's manifest has not admitted (``PrefixSource.unread_files``:
    one listing and one manifest head per partition, read-only -- the job's own trigger under the
    lease stays the only writer of the manifest);
  * an event fires when the unread set is non-empty and it, or the manifest it was judged against,
    differs from the last event's: a new file fires once; an epoch that takes some of the files but
    leaves others (the per-epoch caps) fires again, so a backlog drains epoch after epoch; an epoch
    that only *saw* a file (the source admits a file once two of its listings agree) moved the
    manifest, so the watcher fires once more and the next epoch admits it; an unchanged backlog
    under an unchanged manifest does not fire twice (no epoch storm while nothing can change);
  * an empty unread set fires nothing;
  * a listing that fails (the store unreachable) is logged and retried at the next poll: the watcher
    outlives an outage; a job reference or source uid that does not resolve (a module that raises on
    import included), or a landing zone in process memory (``memory://``, invisible to the
    triggerer), fails the trigger with a one-line error naming it and the remedy;
  * all blocking work (loading the job, listing, reading the manifest) runs in a worker thread:
    the triggerer's event loop is never blocked (10,000 waiting files take about 0.1 s a poll).

The event payload says what is waiting: ``job_id``, ``source``, ``files``, ``bytes``, ``oldest``,
``newest`` (paths relative to the prefix) and ``digest`` (SHA-256 of the unread paths and versions
and the manifest heads).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

log = logging.getLogger(__name__)


class LandingWatchError(ValueError):
    """The watched job or source cannot be resolved; the message names it and the remedy."""


def load_landing_source(job_ref: str, source_uid: str) -> tuple[str, Any]:
    """The job id and the source ``source_uid`` of job ``job_ref`` (which must watch a landing zone)."""
    from spark_jobs.api.specs import SourceSpec
    from spark_jobs.jobs.loading import load_job

    try:
        job = load_job(job_ref)
    except Exception as exc:  # the job's own module: anything it raises ends the watch in one line
        first = (str(exc).splitlines() or [""])[0]
        raise LandingWatchError(
            f"the landing watch of source {source_uid!r} cannot load job {job_ref!r} "
            f"({type(exc).__name__}: {first}): make it import in the triggerer as in the DAG "
            "processor (same code, packages and environment), then restart the triggerer"
        ) from None
    for step, spec in job.graph.steps_of(SourceSpec):
        if step.uid == source_uid:
            if not hasattr(spec.source, "unread_files"):
                raise LandingWatchError(
                    f"source {source_uid!r} of job {job.job_id} ({type(spec.source).__name__}) has no "
                    "landing zone to watch: only a PrefixSource can be watched; schedule the job another way"
                )
            check_watchable(job.job_id, spec.source)
            return job.job_id, spec.source
    uids = sorted(step.uid or "" for step, _ in job.graph.steps_of(SourceSpec))
    raise LandingWatchError(
        f"job {job.job_id} ({job_ref}) has no source {source_uid!r} (it has {', '.join(uids)}): "
        "redeploy the DAG so its watcher names a current source"
    )


def check_watchable(job_id: str, source: Any) -> None:
    """Refuse a landing zone or manifest in process memory (``memory://``): the triggerer is another
    process, it would watch an empty store of its own and never see a file or an epoch."""
    for what, store in (("landing zone", source.landing), ("manifest store", source.manifest.store)):
        if str(store.uri).startswith("memory:"):
            raise LandingWatchError(
                f"source {source.uid!r} of job {job_id}: its {what} {store.uri} lives in one process's "
                "memory, which the Airflow triggerer cannot see: put it in a folder (file://) or an S3 "
                "prefix, or schedule the job by time (EPOCHAL_SCHEDULE)"
            )


def unread_summary(job_id: str, source: Any) -> dict[str, Any]:
    """What the source has not read yet (blocking I/O: one listing, one manifest read)."""
    unread = source.unread_files()
    files = unread.files
    digest = hashlib.sha256(unread.manifest_state.encode() + b"\n")
    for f in sorted(files, key=lambda f: f.path):
        digest.update(f"{f.path}\0{f.version}\n".encode())
    return {
        "job_id": job_id,
        "source": source.uid,
        "files": len(files),
        "bytes": sum(f.size for f in files),
        "oldest": files[0].path if files else "",
        "newest": files[-1].path if files else "",
        "digest": digest.hexdigest(),
    }


class NewLandingFilesTrigger(BaseEventTrigger):
    """Fires while a landing zone holds unread files (module docstring); never returns."""

    def __init__(self, job_ref: str, source_uid: str, poll_interval: float = 30.0) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.job_ref, self.source_uid, self.poll_interval = job_ref, source_uid, poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "epochal_airflow.triggers.landing.NewLandingFilesTrigger",
            {"job_ref": self.job_ref, "source_uid": self.source_uid, "poll_interval": self.poll_interval},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        job_id, source = await asyncio.to_thread(load_landing_source, self.job_ref, self.source_uid)
        announced = ""
        while True:
            try:
                found = await asyncio.to_thread(unread_summary, job_id, source)
            except Exception as exc:  # an outage must not end the watch: retried next poll
                log.warning(
                    "landing watch of %s.%s: listing failed (%s); retrying in %ss",
                    job_id, self.source_uid, exc, self.poll_interval,
                )  # fmt: skip
            else:
                if found["files"] and found["digest"] != announced:
                    announced = found["digest"]
                    yield TriggerEvent(found)  # type: ignore[no-untyped-call]
            await asyncio.sleep(self.poll_interval)
