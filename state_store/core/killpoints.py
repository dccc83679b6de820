"""Names of the protocol steps where a fault kit may crash the process (``EPOCHAL_FAULT``).

Each is checked by the code that performs the step, through the injected ``KillSwitch``.
"""

AFTER_PENDING = "after_pending"  # trigger: id allocated, _pending.json written
AFTER_ATTEMPT = "after_attempt"  # run_epoch: attempt registered
AFTER_STATE_UPLOAD = "after_state_upload"  # task: state files written, no ack yet
BEFORE_ACK = "before_ack"  # task: about to write its ack
AFTER_ACK = "after_ack"  # task: ack written
BEFORE_DECISION = "before_decision"  # complete: all acks verified, nothing decided
AFTER_CHAIN_COMMIT = "after_chain_commit"  # complete: the job record names n as chain head, no decision
BEFORE_METADATA = "before_metadata"  # complete: COMPLETE decided, _metadata.json not written
AFTER_METADATA = "after_metadata"  # complete: _metadata.json written, LATEST not moved
AFTER_POINTER = "after_pointer"  # complete: LATEST moved, older pending not yet subsumed
MID_SINK_COMMIT = "mid_sink_commit"  # notify: a sink committed, the rest of notify not done
MID_RETENTION = "mid_retention"  # retention: some files deleted, not all

ALL = (
    AFTER_PENDING,
    AFTER_ATTEMPT,
    AFTER_STATE_UPLOAD,
    BEFORE_ACK,
    AFTER_ACK,
    BEFORE_DECISION,
    AFTER_CHAIN_COMMIT,
    BEFORE_METADATA,
    AFTER_METADATA,
    AFTER_POINTER,
    MID_SINK_COMMIT,
    MID_RETENTION,
)
