from epochal_airflow.hooks import postgres  # registers the PostgresSink's conn_id resolver
from epochal_airflow.hooks.store import EpochalStoreHook

__all__ = ["EpochalStoreHook", "postgres"]
