"""The FastAPI app of the Checkpoints view (mounted under :data:`URL_PREFIX` by the plugin).

Routes (all require an authenticated Airflow user, exactly like the rest of the Airflow UI: a JWT in
``Authorization: Bearer`` or the UI's session cookie; Airflow's own ``requires_authenticated``):

* ``GET /checkpoints`` -- HTML: every job with its health, latest completed checkpoint and age, failures
  in the last day and state-size trend, and the jobs that do not load; ``/checkpoints/{job}?tab=`` --
  Flink's tabs (overview, history, summary, configuration) plus savepoints; ``/checkpoints/{job}/{id}``
  -- one checkpoint per operator and subtask.
* ``GET|POST /checkpoints/{job}/trigger/{restore|backfill}?savepoint=<name>`` -- the ``epochal_restore``
  / ``epochal_backfill`` conf prefilled from a savepoint; the POST triggers the DAG through Airflow's
  own REST API (``POST /api/v2/dags/{dag_id}/dagRuns``) with the user's own token (their session
  cookie or bearer token), so Airflow decides whether this user may trigger it, and shows the
  result. (Airflow 3.3's UI has no URL that opens its trigger form with a conf prefilled.) CSRF: a
  POST is refused (403) unless it proves it comes from this site -- ``Sec-Fetch-Site`` not cross-site,
  an ``Origin`` (else ``Referer``) whose host is this request's host (``Origin: null`` never is), and
  with neither header only a request whose token is an ``Authorization`` header (not a cookie a browser
  attaches by itself). The user's token goes only to the API server this app runs in (the local socket
  address, never the request's ``Host`` header). The body must be the form (urlencoded UTF-8).
* ``GET /api/jobs``, ``/api/jobs/{job}``, ``/api/jobs/{job}/checkpoints``,
  ``/api/jobs/{job}/checkpoints/{id}``, ``/api/jobs/{job}/configuration``, ``/api/jobs/{job}/savepoints``
  -- the same data as JSON
  (OpenAPI document at ``/openapi.json``, docs at ``/docs``).

Bad input (a job id that is not a safe name, an unknown checkpoint, a bad page) is a 400/404 whose
``detail`` is one line naming the value and the remedy (a bad query value on the HTML routes is a 422
with such a line; the JSON API keeps the 422 body its OpenAPI document declares). The app never writes
to storage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response

from epochal_airflow.ui import URL_PREFIX, schemas
from epochal_airflow.ui import trigger as trigger_pages
from state_store.core.layout import InvalidNameError, validate_name
from state_store.core.ports import ObjectStore, StoreError
from state_store.monitoring import STATUSES, CheckpointStats, JobStats, MonitoringError
from state_store.monitoring import html as render
from state_store.monitoring.health import job_health
from state_store.monitoring.savepoints import SavepointInfo, list_savepoints

__all__ = ["URL_PREFIX", "JobDirectory", "app_from_settings", "create_app"]
API_TITLE = "Epochal checkpoints"

JobId = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")]
CheckpointId = Annotated[int, Path(ge=1, le=9_999_999_999)]
Offset = Annotated[int, Query(ge=0, le=10_000_000)]
Limit = Annotated[int, Query(ge=1, le=500)]
Status = Annotated[str | None, Query(pattern="^(" + "|".join(STATUSES) + ")$")]
Tab = Annotated[str, Query(pattern="^(" + "|".join(render.TABS) + ")$")]
TriggerKind = Annotated[str, Path(pattern="^(restore|backfill)$")]
SavepointName = Annotated[
    str, Query(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
]
TRIGGER_DAGS = {"restore": "epochal_restore", "backfill": "epochal_backfill"}
FORM = "application/x-www-form-urlencoded"
REMEDIES = {"savepoint": "pick one from the Savepoints tab", "tab": f"use one of {', '.join(render.TABS)}"}


def cross_site(request: Request) -> str | None:
    """Why a state-changing request may come from another site (None: it provably does not)."""
    headers = request.headers
    host = headers.get("host", "")
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return f"the browser says it comes from a {headers['sec-fetch-site']} page"
    for name in ("origin", "referer"):
        if (value := headers.get(name)) is not None:
            if value == "null" or urlsplit(value).netloc != host:
                return f"its {name.capitalize()} is {value!r}, not this site ({host})"
            return None
    if not headers.get("authorization"):
        return "it carries neither Origin nor Referer, and a cookie a browser sends by itself"
    return None


def own_origin(request: Request) -> str:
    """The API server this app runs in, by its local socket address (never the ``Host`` header,
    which the client chooses): where the user's token may go."""
    server = request.scope.get("server")
    if not server:
        return f"{request.url.scheme}://{request.url.netloc}"
    host, port = server
    return f"{request.url.scheme}://{f'[{host}]' if ':' in str(host) else host}:{port}"


def dag_id_for(job_id: str) -> str:
    return "epochal_" + job_id.replace("-", "_")


class JobDirectory:
    """Which jobs the view lists and their declared checkpoint configuration (from the Epochal
    settings: ``EPOCHAL_JOBS`` job references, plus ``EPOCHAL_MONITOR_JOBS`` plain job ids)."""

    def __init__(self, refs: tuple[str, ...] = (), extra_ids: tuple[str, ...] = ()) -> None:
        self.refs, self.extra_ids = refs, extra_ids
        self._loaded: dict[str, dict[str, Any]] | None = None
        self.broken: dict[str, str] = {}
        """Job references that do not load -> the one-line error (listed, not hidden)."""
        self._lock = threading.Lock()

    def declared(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            if self._loaded is None:
                self._loaded = {}
                for ref in self.refs:
                    try:
                        from spark_jobs.jobs.loading import load_job

                        job = load_job(ref)
                    except Exception as exc:  # listed with its error (broken_jobs), not hidden
                        from epochal_airflow.dag_factory import broken_job_message

                        self.broken[ref] = broken_job_message(ref, exc)
                        continue
                    self._loaded[job.job_id] = {
                        "mode": job.mode,
                        "parallelism": job.parallelism,
                        "max_parallelism": job.max_parallelism,
                        # (None: a deprecated alias absorbed by its new name, e.g. verify_sha256)
                        **{k: v for k, v in asdict(job.checkpoint_config()).items() if v is not None},
                    }
                for job_id in self.extra_ids:
                    self._loaded.setdefault(job_id, {})
            return self._loaded

    def job_ids(self) -> list[str]:
        return sorted(self.declared())

    def broken_jobs(self) -> dict[str, str]:
        self.declared()
        return dict(sorted(self.broken.items()))


def _checked(job_id: str) -> str:
    try:
        return validate_name("job id", job_id)
    except InvalidNameError as exc:
        raise HTTPException(400, str(exc)) from None


def create_app(
    store_factory: Callable[[], ObjectStore],
    directory: JobDirectory | None = None,
    *,
    max_age_ms: int = 2000,
    full_relist_ms: int = 300_000,
    auth: Any = None,
) -> FastAPI:
    """Build the app. ``store_factory`` is called once, on the first request (no I/O at import);
    ``auth`` is the app-wide dependency (default: Airflow's ``requires_authenticated``). Statistics
    are at most ``max_age_ms`` old plus one refresh; retention's deletions show within
    ``full_relist_ms`` (see :class:`state_store.monitoring.CheckpointStats`)."""
    if auth is None:
        from airflow.api_fastapi.core_api.security import requires_authenticated

        auth = requires_authenticated()
    directory = directory or JobDirectory()
    app = FastAPI(
        title=API_TITLE,
        version="1",
        description="Checkpoint statistics of Epochal jobs, rebuilt from each job's storage root.",
        dependencies=[Depends(auth)],
        responses={400: {"model": schemas.Error}, 404: {"model": schemas.Error}},
    )
    state: dict[str, CheckpointStats] = {}
    lock = threading.Lock()

    def service() -> CheckpointStats:
        with lock:
            if "stats" not in state:
                state["stats"] = CheckpointStats(
                    store_factory(), max_age_ms=max_age_ms, full_relist_ms=full_relist_ms
                )
            return state["stats"]

    def job_stats(job_id: str) -> JobStats:
        return service().stats(_checked(job_id))

    @app.exception_handler(MonitoringError)
    async def _bad_request(request: Request, exc: MonitoringError) -> JSONResponse:
        code = 404 if "not in storage" in str(exc) else 400
        return JSONResponse({"detail": str(exc)}, status_code=code)

    @app.exception_handler(RequestValidationError)
    async def _bad_query(request: Request, exc: RequestValidationError) -> Response:
        path, root = request.scope.get("path", ""), request.scope.get("root_path", "")
        if not path.removeprefix(root).startswith("/checkpoints"):  # the JSON API: its declared 422
            return await request_validation_exception_handler(request, exc)
        error = exc.errors()[0]
        name = str(error["loc"][-1])
        remedy = REMEDIES.get(name, "follow a link of the Checkpoints pages")
        detail = f"{name} {error.get('input')!r} is invalid ({error['msg']}): {remedy}"
        return JSONResponse({"detail": " ".join(detail.split())}, status_code=422)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError) -> JSONResponse:
        return JSONResponse({"detail": f"the job's storage could not be read: {exc}"}, status_code=503)

    def base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def links(request: Request, job_id: str, limit: int) -> render.Links:
        root = base(request)

        def page(offset: int, status: str | None) -> str:
            query = {
                "tab": "history",
                "offset": offset,
                "limit": limit,
                **({"status": status} if status else {}),
            }
            return f"{root}/checkpoints/{quote(job_id)}?{urlencode(query)}"

        job_url = f"{root}/checkpoints/{quote(job_id)}"
        return render.Links(
            run=lambda row: render.dag_run_path(job_id, row),
            detail=lambda n: f"{job_url}/{n}",
            page=page,
            back=f"{job_url}?tab=history",
            tab=lambda name: f"{job_url}?tab={name}",
            job=lambda j: f"{root}/checkpoints/{quote(j)}",
            action=lambda kind, sp: (  # a savepoint that does not decode offers no action
                None if sp.error else f"{job_url}/trigger/{kind}?{urlencode({'savepoint': sp.name})}"
            ),
        )

    def configuration(stats: JobStats) -> dict[str, Any]:
        declared = directory.declared().get(stats.job_id, {})
        return {**stats.configuration, **{f"declared.{k}": v for k, v in declared.items()}}

    # -- HTML --------------------------------------------------------------------------------
    def savepoints_of(job_id: str) -> list[SavepointInfo]:
        return list_savepoints(service().store, _checked(job_id))

    def now_ms() -> int:
        return int(time.time() * 1000)

    def crumbs(request: Request, job_id: str | None = None) -> str:
        parts = [f'<a href="{base(request)}/checkpoints">Checkpoints</a>']
        if job_id is not None:
            parts.append(f'<a href="{base(request)}/checkpoints/{quote(job_id)}">{render.esc(job_id)}</a>')
        return '<nav class="crumbs">' + " / ".join(parts) + "</nav>"

    @app.get("/checkpoints", response_class=HTMLResponse, include_in_schema=False)
    def index(request: Request) -> str:
        healths, errors = [], {}
        for job_id in directory.job_ids():
            try:
                healths.append(job_health(service().stats(job_id), now_ms()))
            except (StoreError, MonitoringError) as exc:  # one unreadable job must not hide the others
                errors[job_id] = f"its storage could not be read: {exc}"
        return render.jobs_page(
            healths,
            directory.broken_jobs(),
            now_ms=now_ms(),
            links=render.Links(job=lambda j: f"{base(request)}/checkpoints/{quote(j)}"),
            errors=errors,
        )

    @app.get("/checkpoints/{job_id}", response_class=HTMLResponse, include_in_schema=False)
    def job_page(
        request: Request,
        job_id: JobId,
        tab: Tab = "overview",
        offset: Offset = 0,
        limit: Limit = 50,
        status: Status = None,
    ) -> str:
        stats = job_stats(job_id)
        return render.job_page(
            stats,
            offset=offset,
            limit=limit,
            status=status,
            links=links(request, job_id, limit),
            configuration=configuration(stats),
            nav=crumbs(request),
            tab=tab,
            savepoints=savepoints_of(job_id) if tab in ("history", "savepoints") else (),
            now_ms=now_ms(),
        )

    @app.get("/checkpoints/{job_id}/{checkpoint_id}", response_class=HTMLResponse, include_in_schema=False)
    def detail_page(request: Request, job_id: JobId, checkpoint_id: CheckpointId) -> str:
        detail = service().detail(_checked(job_id), checkpoint_id)
        return render.detail_page(
            detail,
            links=links(request, job_id, 50),
            nav=crumbs(request, job_id),
            savepoints=savepoints_of(job_id),
        )

    def savepoint_named(job_id: str, name: str) -> SavepointInfo:
        found = next((s for s in savepoints_of(job_id) if s.name == name), None)
        if found is None:
            raise HTTPException(
                404, f"savepoint {name!r} of job {job_id} does not exist: pick one from the Savepoints tab"
            )
        if found.error:
            why = " ".join(found.error.split())
            raise HTTPException(
                409,
                f"savepoint {name!r} of job {job_id} does not decode ({why}): nothing can be restored or "
                "backfilled from it; pick another from the Savepoints tab",
            )
        return found

    @app.get("/checkpoints/{job_id}/trigger/{kind}", response_class=HTMLResponse, include_in_schema=False)
    def trigger_form(request: Request, job_id: JobId, kind: TriggerKind, savepoint: SavepointName) -> str:
        sp = savepoint_named(job_id, savepoint)
        return trigger_pages.form(
            kind, TRIGGER_DAGS[kind], job_id, sp, nav=crumbs(request, job_id), action=str(request.url)
        )

    @app.post("/checkpoints/{job_id}/trigger/{kind}", response_class=HTMLResponse, include_in_schema=False)
    async def trigger_submit(
        request: Request, job_id: JobId, kind: TriggerKind, savepoint: SavepointName
    ) -> HTMLResponse:
        if (why := cross_site(request)) is not None:
            raise HTTPException(
                403, f"a trigger must come from this Airflow's own pages, not from another site: {why}"
            )
        sp = savepoint_named(job_id, savepoint)
        dag_id = TRIGGER_DAGS[kind]
        kind_of_body = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind_of_body != FORM:
            raise HTTPException(
                415,
                f"the trigger takes the form's fields ({FORM}), not {kind_of_body or 'no content type'}: "
                f"submit the form on this page, or POST JSON to Airflow's /api/v2/dags/{dag_id}/dagRuns",
            )
        try:
            raw = (await request.body()).decode("utf-8")
            fields = {k: v[-1] for k, v in parse_qs(raw, errors="strict").items()}
        except UnicodeDecodeError:
            raise HTTPException(
                400, "the trigger form's body is not UTF-8: submit the form on this page"
            ) from None
        try:
            conf = trigger_pages.conf_of(kind, job_id, sp, fields)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        bearer = request.headers.get("authorization", "")
        token = request.cookies.get("_token") or (bearer[7:] if bearer[:7].lower() == "bearer " else "")
        if not token.strip():
            raise HTTPException(
                401,
                "this request carries no Airflow token (the _token cookie or a Bearer header): "
                "log in to Airflow again and resubmit",
            )
        target = own_origin(request)
        import httpx

        try:
            async with httpx.AsyncClient(timeout=30) as client:
                answer = await client.post(
                    f"{target}/api/v2/dags/{quote(dag_id)}/dagRuns",
                    json={"logical_date": None, "conf": conf},
                    headers={"Authorization": f"Bearer {token}"},
                )
        except httpx.HTTPError as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise HTTPException(
                502,
                f"Airflow's REST API at {target} did not answer ({reason}): "
                "check that the api-server runs, then resubmit",
            ) from None
        try:
            body = answer.json()
        except ValueError:
            body = {"detail": answer.text[:500]}
        page = trigger_pages.result(
            dag_id, job_id, conf, answer.status_code, body, nav=crumbs(request, job_id)
        )
        return HTMLResponse(page, status_code=200 if answer.status_code < 300 else answer.status_code)

    # -- JSON --------------------------------------------------------------------------------
    @app.get("/api/jobs", response_model=schemas.Jobs)
    def api_jobs() -> dict[str, Any]:
        """The configured jobs."""
        return {"jobs": directory.job_ids(), "broken": directory.broken_jobs()}

    @app.get("/api/jobs/{job_id}", response_model=schemas.JobOverview)
    def api_overview(job_id: JobId) -> dict[str, Any]:
        """Counts, latest completed/savepoint/failure/restore, and summary statistics."""
        stats = job_stats(job_id)
        return {
            "overview": stats.overview.to_json(),
            "summary": stats.summaries_json(),
            "dag_id": dag_id_for(job_id),
        }

    @app.get("/api/jobs/{job_id}/checkpoints", response_model=schemas.CheckpointPage)
    def api_checkpoints(
        job_id: JobId, offset: Offset = 0, limit: Limit = 50, status: Status = None
    ) -> dict[str, Any]:
        """One page of the history, newest first."""
        stats = job_stats(job_id)
        rows = stats.page(offset=offset, limit=limit, status=status)
        return {
            "job_id": job_id,
            "total": stats.count(status),
            "offset": offset,
            "limit": limit,
            "status": status,
            "checkpoints": [r.to_json() for r in rows],
        }

    @app.get("/api/jobs/{job_id}/checkpoints/{checkpoint_id}", response_model=schemas.CheckpointDetail)
    def api_checkpoint(job_id: JobId, checkpoint_id: CheckpointId) -> dict[str, Any]:
        """One checkpoint per operator and subtask."""
        return service().detail(_checked(job_id), checkpoint_id).to_json()

    @app.get("/api/jobs/{job_id}/configuration", response_model=schemas.Configuration)
    def api_configuration(job_id: JobId) -> dict[str, Any]:
        """The job's checkpointing configuration: from storage, and as declared by the job."""
        stats = job_stats(job_id)
        return {
            "job_id": job_id,
            "storage": stats.configuration,
            "declared": directory.declared().get(job_id, {}),
        }

    @app.get("/api/jobs/{job_id}/savepoints", response_model=schemas.Savepoints)
    def api_savepoints(job_id: JobId) -> dict[str, Any]:
        """The job's savepoints, newest first, with the location the restore and backfill DAGs take."""
        return {"job_id": job_id, "savepoints": [asdict(s) for s in savepoints_of(job_id)]}

    return app


def app_from_settings() -> FastAPI:
    """The app as the plugin mounts it: store and jobs from the Epochal settings (environment)."""

    from epochal_airflow.config import EpochalSettings

    def store() -> ObjectStore:
        from epochal_airflow.hooks.store import EpochalStoreHook

        settings = EpochalSettings.from_env()
        return EpochalStoreHook(settings.store_uri, settings.conn_id).get_store()

    def directory() -> JobDirectory:
        from epochal_airflow.config import monitored_jobs

        return JobDirectory(*monitored_jobs())

    return create_app(store, directory())
