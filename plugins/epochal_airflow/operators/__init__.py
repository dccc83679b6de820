from epochal_airflow.operators.checkpoint import (
    ApplyRetentionOperator,
    CompleteCheckpointOperator,
    NotifyCheckpointCompleteOperator,
    RunEpochOperator,
    TriggerCheckpointOperator,
    ValidateCheckpointOperator,
)

__all__ = [
    "ApplyRetentionOperator",
    "CompleteCheckpointOperator",
    "NotifyCheckpointCompleteOperator",
    "RunEpochOperator",
    "TriggerCheckpointOperator",
    "ValidateCheckpointOperator",
]
