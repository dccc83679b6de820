from epochal_airflow.triggers.checkpoint import CheckpointDecidedTrigger

__all__ = ["CheckpointDecidedTrigger"]
