from epochal_airflow.operators.checkpoint import (
    ApplyRetentionOperator,
    CompleteCheckpointOperator,
    NotifyCheckpointCompleteOperator,
    RunEpochOperator,
    TriggerCheckpointOperator,
    ValidateCheckpointOperator,
)
from epochal_airflow.operators.spark_submit import SparkSubmitEpochOperator

__all__ = [
    "ApplyRetentionOperator",
    "CompleteCheckpointOperator",
    "NotifyCheckpointCompleteOperator",
    "RunEpochOperator",
    "SparkSubmitEpochOperator",
    "TriggerCheckpointOperator",
    "ValidateCheckpointOperator",
]
