"""The ObjectStore contract suite against a real SeaweedFS S3 server, plus one protocol run."""

from __future__ import annotations

import pytest

from state_store.core import CheckpointConfig, CompletedCheckpointStore, TaskCheckpointResponder
from state_store.storage.s3 import S3ObjectStore
from tests.unit.core.helpers import Job, make_job
from tests.unit.storage.contract import ObjectStoreContract

pytestmark = pytest.mark.integration


class TestS3ObjectStoreContract(ObjectStoreContract):
    __test__ = True

    @pytest.fixture
    def store(self, s3_store: S3ObjectStore) -> S3ObjectStore:
        return s3_store


def test_checkpoint_cycles_retention_and_recovery_on_seaweedfs(s3_store: S3ObjectStore) -> None:
    job: Job = make_job(
        CheckpointConfig(timeout_ms=60_000, retained_checkpoints=2, orphan_grace_ms=0), store=s3_store
    )
    job.responder = TaskCheckpointResponder(s3_store, job.job_id)
    ids = [job.cycle() for _ in range(4)]
    from state_store.core.cleaner import apply_retention

    plan = apply_retention(s3_store, job.job_id, job.coordinator.config, job.clock)
    assert plan.retained == tuple(ids[-2:])
    s3_store.delete(job.coordinator.layout.latest)
    completed, report = CompletedCheckpointStore.recover(s3_store, job.coordinator.layout, 2, deep=True)
    assert report.chosen == ids[-1]
    assert [c.checkpoint_id for c in completed] == [ids[-1], ids[-2]]
