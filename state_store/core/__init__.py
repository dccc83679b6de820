"""The pure protocol core: standard library only, no I/O of its own, no clock reads.

Storage, time and fault injection come in through the ports (``state_store.core.ports``).
"""

from state_store.core.cleaner import apply_retention
from state_store.core.codec import FORMAT_VERSION, ManifestError, UnsupportedFormatVersion
from state_store.core.completed import (
    ChainHeadError,
    CheckpointVerificationError,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    RecoveryReport,
    load_completed,
)
from state_store.core.config import CheckpointConfig, InvalidConfigError
from state_store.core.coordinator import (
    CheckpointCoordinator,
    CompletionResult,
    Gate,
    MasterHook,
    RestoreCommit,
)
from state_store.core.errors import BadInputError, EpochalError
from state_store.core.failures import CheckpointException, CheckpointFailureReason, JobFailedError
from state_store.core.history import CheckpointSummary, checkpoint_history
from state_store.core.jobrecord import JobRecords
from state_store.core.layout import InvalidNameError, JobLayout, validate_name
from state_store.core.lease import LeaseHeldError, LeaseLostError
from state_store.core.manifests import (
    AckRecord,
    AttemptRecord,
    CompletedMetadata,
    DecisionRecord,
    DeclineRecord,
    JobRecord,
    LatestPointer,
    Outcome,
    PendingRecord,
    StateHandle,
    TaskId,
)
from state_store.core.pending import AckResult, IllegalCheckpointState, PendingCheckpoint, PendingState
from state_store.core.ports import (
    NO_KILL,
    Clock,
    KillSwitch,
    ObjectAlreadyExists,
    ObjectData,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    StoreError,
    TransientStoreError,
    VersionMismatch,
)
from state_store.core.properties import CheckpointProperties, RetentionPolicy
from state_store.core.responder import TaskCheckpointResponder
from state_store.core.retention import CheckpointFacts, RetentionInputs, RetentionPlan, plan_retention
from state_store.core.status import CheckpointStatus, status_of

__all__ = [
    "FORMAT_VERSION",
    "NO_KILL",
    "AckRecord",
    "AckResult",
    "AttemptRecord",
    "BadInputError",
    "ChainHeadError",
    "CheckpointConfig",
    "CheckpointCoordinator",
    "CheckpointException",
    "CheckpointFacts",
    "CheckpointFailureReason",
    "CheckpointProperties",
    "CheckpointStatus",
    "CheckpointSummary",
    "CheckpointVerificationError",
    "Clock",
    "CompletedCheckpoint",
    "CompletedCheckpointStore",
    "CompletedMetadata",
    "CompletionResult",
    "DecisionRecord",
    "DeclineRecord",
    "EpochalError",
    "Gate",
    "IllegalCheckpointState",
    "InvalidConfigError",
    "InvalidNameError",
    "JobFailedError",
    "JobLayout",
    "JobRecord",
    "JobRecords",
    "KillSwitch",
    "LatestPointer",
    "LeaseHeldError",
    "LeaseLostError",
    "ManifestError",
    "MasterHook",
    "ObjectAlreadyExists",
    "ObjectData",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "Outcome",
    "PendingCheckpoint",
    "PendingRecord",
    "PendingState",
    "RecoveryReport",
    "RestoreCommit",
    "RetentionInputs",
    "RetentionPlan",
    "RetentionPolicy",
    "StateHandle",
    "StoreError",
    "TaskCheckpointResponder",
    "TaskId",
    "TransientStoreError",
    "UnsupportedFormatVersion",
    "VersionMismatch",
    "apply_retention",
    "checkpoint_history",
    "load_completed",
    "plan_retention",
    "status_of",
    "validate_name",
]
