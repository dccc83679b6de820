"""CheckpointSensor: wait until checkpoint n of a job completes; fail if it aborts.

``poke`` mode checks storage every ``poke_interval``; ``deferrable=True`` hands the wait to
:class:`~epochal_airflow.triggers.checkpoint.CheckpointDecidedTrigger` in the triggerer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException

from epochal_airflow.hooks.store import EpochalStoreHook
from epochal_airflow.triggers.checkpoint import CheckpointDecidedTrigger, checkpoint_status
from state_store.core.status import CheckpointStatus


class CheckpointSensor(BaseSensorOperator):
    template_fields: Sequence[str] = ("store_uri", "conn_id", "checkpoint_id")

    def __init__(
        self,
        *,
        job_id: str,
        store_uri: str,
        checkpoint_id: int | str,
        conn_id: str | None = None,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id, self.store_uri, self.conn_id = job_id, store_uri, conn_id
        self.checkpoint_id = checkpoint_id
        self.deferrable = deferrable

    def _uri(self) -> str:
        hook = EpochalStoreHook(self.store_uri, self.conn_id)
        hook.export_credentials()
        return hook.resolved_uri()

    def _check(self, status: dict[str, Any] | None) -> bool:
        if status is None or status["status"] == CheckpointStatus.COMPLETING:
            return False
        if status["status"] != CheckpointStatus.COMPLETED:  # aborted, or its documents are unreadable
            n, what, reason = status["checkpoint_id"], status["status"], status["reason"]
            raise AirflowException(f"checkpoint {n} of job {self.job_id} {what}: {reason}")
        self.log.info(
            "epochal checkpoint_sensor: job=%s checkpoint_id=%s status=completed",
            self.job_id,
            status["checkpoint_id"],
        )
        return True

    def poke(self, context: Any) -> bool:
        return self._check(checkpoint_status(self._uri(), self.job_id, int(self.checkpoint_id)))

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(
            trigger=CheckpointDecidedTrigger(
                self._uri(), self.job_id, int(self.checkpoint_id), self.poke_interval
            ),
            method_name="execute_complete",
        )
        return None

    def execute_complete(self, context: Any, event: dict[str, Any]) -> None:
        self._check(event)
