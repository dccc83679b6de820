"""Storage adapters for the ObjectStore port: memory, local filesystem, S3 (boto3)."""

from state_store.storage.local import LocalObjectStore
from state_store.storage.memory import MemoryObjectStore
from state_store.storage.uri import InvalidStoreURI, open_store

__all__ = ["InvalidStoreURI", "LocalObjectStore", "MemoryObjectStore", "open_store"]
