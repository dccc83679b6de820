"""The production Clock adapter: wall-clock milliseconds."""

from __future__ import annotations

import time


class SystemClock:
    """Wall-clock milliseconds since the Unix epoch (``time.time_ns``)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
