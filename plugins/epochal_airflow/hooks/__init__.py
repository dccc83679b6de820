from epochal_airflow.hooks.store import EpochalStoreHook

__all__ = ["EpochalStoreHook"]
