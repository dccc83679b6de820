"""An ASGI app built on its first request.

Airflow imports every plugin module in every task process (to integrate macros), but only the API
server ever calls the app: building the FastAPI app (and importing Airflow's API security module)
at import would cost seconds per task for nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class LazyASGIApp:
    """Calls ``factory`` once, on the first request (any ASGI scope), then delegates to its app."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._app: Any = None
        self._lock = threading.Lock()

    def app(self) -> Any:
        with self._lock:
            if self._app is None:
                self._app = self._factory()
            return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app()(scope, receive, send)
