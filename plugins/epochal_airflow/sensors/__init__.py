from epochal_airflow.sensors.checkpoint import CheckpointSensor

__all__ = ["CheckpointSensor"]
