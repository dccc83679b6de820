"""Task side of the protocol: upload state files, then acknowledge or decline (seed 001).

Order inside a subtask at barrier n (kill points in brackets)::

    upload_state(...) for every key-group range   -> StateHandle(key, size, checksum)
    [after_state_upload]
    [before_ack]  acknowledge(AckRecord)           create-only acks/<uid>/<subtask>-g<gen>-a<attempt>.json
    [after_ack]

Each file's checksum (BLAKE3, ``state_store.core.checksums``) is computed here, while writing, and
the store verifies the bytes against it on upload where it can (``checksums.put_checked``); the
coordinator takes it from the ack instead of reading the file back.

An ack is written create-only, so a retried write of the same ack is harmless and a different ack
for the same (task, attempt) is refused. A crash before the ack leaves only unreferenced files,
removed by retention after the orphan grace period.
"""

from __future__ import annotations

from state_store.core import checksums, documents, killpoints
from state_store.core.layout import JobLayout
from state_store.core.manifests import AckBundleEntry, AckRecord, DeclineRecord, StateHandle
from state_store.core.ports import NO_KILL, KillSwitch, ObjectAlreadyExists, ObjectStore


class TaskCheckpointResponder:
    """Writes one subtask's state files, ack or decline for a job."""

    def __init__(self, store: ObjectStore, job_id: str, *, kill: KillSwitch = NO_KILL) -> None:
        self.store = store
        self.layout = JobLayout(job_id)
        self.kill = kill
        self.receipts: list[AckBundleEntry] = []
        """The acks this responder created, each with the version the store gave the write (for
        the epoch run's ack bundle, ``state_store.core.ack_bundles``)."""

    def upload_state(
        self, checkpoint_id: int, uid: str, first_kg: int, last_kg: int, data: bytes, fmt: str = "arrow"
    ) -> StateHandle:
        """Write an exclusive state file of checkpoint n and return its handle."""
        key = self.layout.state_file(checkpoint_id, uid, first_kg, last_kg, fmt)
        checksum = checksums.checksum_of(data)
        checksums.put_checked(self.store, key, data, checksum)
        return StateHandle(key, len(data), checksum)

    def upload_channel_state(self, checkpoint_id: int, uid: str, subtask: int, data: bytes) -> StateHandle:
        """Write the in-flight data of an unaligned checkpoint (replayed first on restore)."""
        key = self.layout.channel_file(checkpoint_id, uid, subtask, "arrow")
        checksum = checksums.checksum_of(data)
        checksums.put_checked(self.store, key, data, checksum)
        return StateHandle(key, len(data), checksum)

    def upload_shared(self, uid: str, data: bytes, fmt: str = "arrow") -> StateHandle:
        """Write (or reuse) a content-addressed file under ``shared/`` (incremental checkpoints),
        named by its BLAKE3 digest."""
        digest = checksums.hex_of(data)
        checksum = f"{checksums.STATE_FILE_ALGORITHM}:{digest}"
        key = self.layout.shared_file(uid, digest, fmt)
        if self.store.head(key) is None:
            checksums.put_checked(self.store, key, data, checksum, create_only=True)
        return StateHandle(key, len(data), checksum)

    def acknowledge(self, ack: AckRecord) -> None:
        """Write the ack create-only. A re-run of the same task attempt (Spark re-executes a task
        after a lost executor or for speculation) finds its own ack: accepted when it names the same
        state (metrics such as bytes written may differ on a re-run); anything else is refused."""
        self.kill(killpoints.BEFORE_ACK, ack.checkpoint_id)
        key = self.layout.ack(ack.checkpoint_id, ack.task.uid, ack.task.subtask, ack.attempt, ack.generation)
        document = documents.encode(ack)
        try:
            version = self.store.put_if_absent(key, document)
        except ObjectAlreadyExists:
            existing = documents.read(self.store, key, AckRecord)
            if {h.key for h in existing.handles} != {h.key for h in ack.handles}:
                raise
        else:
            self.receipts.append(AckBundleEntry(key, version, document.decode()))
        self.kill(killpoints.AFTER_ACK, ack.checkpoint_id)

    def decline(self, decline: DeclineRecord) -> None:
        key = self.layout.decline(
            decline.checkpoint_id, decline.task.uid, decline.task.subtask, decline.attempt, decline.generation
        )
        documents.create(self.store, key, decline)
