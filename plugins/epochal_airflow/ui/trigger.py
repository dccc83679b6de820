"""The "restore from this" / "backfill from this" pages of the Savepoints tab.

Airflow 3.3's UI has no URL that opens a DAG's trigger form with a conf prefilled, so the view shows
its own short form (the conf of ``epochal_restore`` / ``epochal_backfill`` prefilled from the
savepoint, the choices a person must make as fields) and, on submit, the app triggers the DAG
through Airflow's REST API with the user's own token. :func:`conf_of` builds the conf from the form
and refuses a bad value with one line naming the field and the accepted values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from state_store.monitoring.html import esc, page
from state_store.monitoring.savepoints import SavepointInfo

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def conf_of(kind: str, job_id: str, sp: SavepointInfo, fields: Mapping[str, str]) -> dict[str, Any]:
    """The DAG run conf: ``restore`` -> ``epochal_restore``'s, ``backfill`` -> ``epochal_backfill``'s."""
    if kind == "restore":
        return {
            "job": job_id,
            "source": sp.location,
            "dry_run": fields.get("dry_run") == "on",
            "allow_non_restored_state": fields.get("allow_non_restored_state") == "on",
        }
    new_job_id = fields.get("new_job_id", "").strip()
    if not _NAME.match(new_job_id):
        raise ValueError(
            f"new job id {new_job_id!r} is invalid: "
            "use letters, digits, '_', '.', '-' (up to 128), e.g. backfill"
        )
    epochs = fields.get("epochs", "").strip()
    if not (epochs.isascii() and epochs.isdigit()) or not 1 <= int(epochs) <= 100_000:
        raise ValueError(f"epochs {epochs!r} is invalid: use a whole number from 1 to 100000")
    return {"job": job_id, "savepoint": sp.location, "new_job_id": new_job_id, "epochs": int(epochs)}


def form(kind: str, dag_id: str, job_id: str, sp: SavepointInfo, *, nav: str, action: str) -> str:
    if kind == "restore":
        what = (
            f"Restore job <b>{esc(job_id)}</b> from savepoint <b>{esc(sp.name)}</b>. A dry run only prints "
            "the restore plan; a plan that drops state, rescales or maps uids waits for an approval in "
            "Airflow before it changes anything."
        )
        inputs = (
            '<label><input type="checkbox" name="dry_run" checked> dry run (print the plan only)</label><br>'
            '<label><input type="checkbox" name="allow_non_restored_state"> allow non-restored state</label>'
        )
    else:
        what = (
            f"Fork job <b>{esc(job_id)}</b> from savepoint <b>{esc(sp.name)}</b> "
            "into a new job and reprocess "
            "into its own fenced sink, beside production (Airflow's own Backfill button re-runs dates of "
            "one DAG instead; use this for a savepoint)."
        )
        inputs = (
            '<label>new job id <input name="new_job_id" value="backfill" required></label><br>'
            '<label>epochs <input name="epochs" type="number" min="1" value="10" required></label>'
        )
    body = (
        f"{nav}<h1>Trigger {esc(dag_id)}</h1><p>{what}</p>"
        f'<table class="kv"><tr><th>job</th><td>{esc(job_id)}</td></tr>'
        f"<tr><th>savepoint</th><td><code>{esc(sp.location)}</code></td></tr></table>"
        f'<form method="post" action="{esc(action)}" class="trigger" data-dag="{esc(dag_id)}">{inputs}'
        '<p><button type="submit" class="button">Trigger</button></p></form>'
    )
    return page(f"Trigger {dag_id}", body)


def result(dag_id: str, job_id: str, conf: Mapping[str, Any], status: int, body: Any, *, nav: str) -> str:
    if status < 300 and isinstance(body, dict) and body.get("dag_run_id"):
        run_id = str(body["dag_run_id"])
        href = f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}"
        text = (
            f'<p class="triggered" data-run="{esc(run_id)}">Triggered <a href="{esc(href)}" target="_top">'
            f"{esc(dag_id)} run {esc(run_id)}</a> ({esc(body.get('state', 'queued'))}).</p>"
        )
    else:
        detail = body.get("detail", body) if isinstance(body, dict) else body
        text = (
            f'<p class="error trigger-failed">Airflow refused to trigger {esc(dag_id)} (HTTP {status}): '
            f"{esc(detail)}</p>"
        )
    conf_rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in conf.items())
    return page(
        f"Trigger {dag_id}", f'{nav}<h1>Trigger {esc(dag_id)}</h1>{text}<table class="kv">{conf_rows}</table>'
    )
