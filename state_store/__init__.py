"""Epochal's library (docs/concepts.md, "Where the code lives"): ``core`` (the pure protocol:
standard library only, no I/O, no clock), the adapters beside it (``storage``, ``formats``,
``validation``), ``monitoring``, and the small modules ``clocks``, ``faults`` (kill switches) and
``lease_keeper``. ``testing`` is the test kit, for tests, benchmarks and the chaos harness only.
Never imports Spark or Airflow (import-linter contracts in pyproject.toml)."""

# BLAKE3 for the core's checksum registry (state files); here so that it is present wherever the
# library is imported (see state_store.hashing).
from state_store import hashing as hashing
