"""Where an Iceberg sink's table lives: a pyiceberg catalog and a table identifier, and the one rule
its commits need from the catalog.

The catalog is a pyiceberg catalog configuration -- a dict of catalog properties (``{"type": "sql",
"uri": "sqlite:///...", "warehouse": "file:///..."}`` for the embedded SQL catalog on SQLite,
``{"type": "rest", "uri": "https://...", ...}`` for a REST catalog; an optional ``"name"`` key names
it, default ``"default"``) or the name of a catalog configured in ``.pyiceberg.yaml`` /
``PYICEBERG_CATALOG__<NAME>__*`` variables. Catalogs are opened once per process and configuration.

Commit rule (what the sink relies on): a commit is one compare-and-swap of the table's metadata
pointer in the catalog, checked against the commit's requirements (for a snapshot: "branch main
still points at the snapshot this commit was built on"); of two commits built on the same snapshot
exactly one lands, the other fails with ``CommitFailedException``. pyiceberg 0.12 then *rebases* a
failed transaction onto the new snapshot and commits it again (``commit.retry.num-retries``), which
would land a decision taken on a stale snapshot -- a zombie's commit after a fence, or a second
commit of a checkpoint. :func:`no_retry` gives a view of a table whose transactions fail instead;
the sink reads the table again and decides again.

Errors are one line: :class:`IcebergCatalogError` (the catalog could not be reached, or refused a
request) names the catalog (its type and uri, without credentials) and the remedy;
:class:`InvalidIcebergTable` is bad configuration.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from state_store.core.errors import BadInputError, EpochalError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

DEFAULT_CATALOG_NAME = "default"
_CATALOGS: dict[tuple[str, str], Catalog] = {}
_CATALOGS_LOCK = threading.Lock()


class IcebergCatalogError(EpochalError):
    """The catalog (or the table's storage behind it) could not be reached or refused a request."""


class InvalidIcebergTable(ValueError, BadInputError):
    """A catalog configuration or table identifier the sink cannot use."""


def first_line(exc: BaseException, limit: int = 160) -> str:
    """``Type: first line of the message``, cut at ``limit`` characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unreachable() -> tuple[type[BaseException], ...]:
    """Exceptions meaning "the catalog or storage did not answer" (connection, file, database)."""
    errors: list[type[BaseException]] = [OSError]
    try:
        from sqlalchemy.exc import DBAPIError

        errors.append(DBAPIError)
    except ImportError:  # pragma: no cover - the sql extra is installed
        pass
    return tuple(errors)


def _masked(uri: str) -> str:
    """``uri`` without a password (``postgresql://user:***@host/db``)."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparseable uri>"
    if parts.password is None:
        return uri
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True, slots=True)
class IcebergTableRef:
    """One table of one catalog: ``catalog_name``, the catalog ``properties`` (never printed: they
    may hold credentials) and the ``identifier`` (namespace parts, then the table name)."""

    catalog_name: str
    identifier: tuple[str, ...]
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, catalog: str | Mapping[str, str], table: str) -> IcebergTableRef:
        """Validate a sink's ``catalog`` and ``table``; a one-line :class:`InvalidIcebergTable`."""
        parts = tuple(table.split(".")) if isinstance(table, str) else ()
        if len(parts) < 2 or not all(p.strip() for p in parts):
            raise InvalidIcebergTable(
                f"Iceberg table {table!r} is not 'namespace.table': name it with its namespace, "
                "e.g. 'lake.orders'"
            )
        if isinstance(catalog, str):
            if not catalog.strip():
                raise InvalidIcebergTable(
                    f"Iceberg table {table}: catalog is empty: give a configured catalog's name or "
                    "a dict of catalog properties"
                )
            return cls(catalog, parts, {})
        if not isinstance(catalog, Mapping):
            raise InvalidIcebergTable(
                f"Iceberg table {table}: catalog must be a catalog name or a dict of catalog "
                f"properties, not {type(catalog).__name__}"
            )
        bad = [k for k, v in catalog.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise InvalidIcebergTable(
                f"Iceberg table {table}: catalog properties must map strings to strings; fix the "
                f"value(s) of {bad} (e.g. 'true' instead of True)"
            )
        properties = {k: v for k, v in catalog.items() if k != "name"}
        return cls(catalog.get("name", DEFAULT_CATALOG_NAME), parts, properties)

    @property
    def table(self) -> str:
        return ".".join(self.identifier)

    @property
    def namespace(self) -> tuple[str, ...]:
        return self.identifier[:-1]

    @property
    def name(self) -> str:
        """How errors and logs name the table: ``lake.orders (catalog default)``."""
        return f"{self.table} (catalog {self.catalog_name})"

    def describe_catalog(self) -> str:
        """``catalog 'default' (sql, sqlite:///...)`` -- type and uri only, never credentials."""
        kind = self.properties.get("type", "")
        uri = self.properties.get("uri", "")
        detail = ", ".join(x for x in (kind, _masked(uri) if uri else "") if x)
        return f"catalog {self.catalog_name!r}" + (f" ({detail})" if detail else " (configured by name)")

    # -- the catalog -------------------------------------------------------------------------
    def catalog(self) -> Catalog:
        """The process's catalog for this configuration (opened on first use)."""
        key = (self.catalog_name, json.dumps(dict(self.properties), sort_keys=True))
        with _CATALOGS_LOCK:
            found = _CATALOGS.get(key)
        if found is not None:
            return found
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchPropertyException

        try:
            opened = load_catalog(self.catalog_name, **dict(self.properties))
        except _unreachable() as exc:
            raise self._unreachable_error("opening the catalog", exc) from None
        except (NoSuchPropertyException, ValueError) as exc:
            raise InvalidIcebergTable(
                f"Iceberg table {self.table}: {self.describe_catalog()} is not configured correctly "
                f"({first_line(exc)}): fix the sink's catalog= (type, uri, warehouse)"
            ) from None
        with _CATALOGS_LOCK:
            return _CATALOGS.setdefault(key, opened)

    @contextmanager
    def reaching(self, action: str) -> Iterator[None]:
        """Run catalog/storage calls; a connection or database failure becomes one line."""
        try:
            yield
        except _unreachable() as exc:
            raise self._unreachable_error(action, exc) from None

    def _unreachable_error(self, action: str, exc: BaseException) -> IcebergCatalogError:
        return IcebergCatalogError(
            f"Iceberg table {self.table}: cannot reach {self.describe_catalog()} or its warehouse "
            f"storage while {action} ({first_line(exc)}): start the catalog service or fix the sink's "
            "catalog= (uri, warehouse, credentials), then retry (a commit that landed is recognized "
            "and never applied twice)"
        )

    def load(self) -> Table | None:
        """The table's current metadata, or None if the table does not exist (yet)."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        catalog = self.catalog()
        with self.reaching("loading the table"):
            try:
                return catalog.load_table(self.identifier)
            except (NoSuchTableError, NoSuchNamespaceError):
                return None

    def create(self, schema: pa.Schema) -> Table:
        """Create the table (unpartitioned, from ``schema``) and its namespace if missing; the
        table another committer created meanwhile otherwise. Schema conversion errors propagate."""
        catalog = self.catalog()
        with self.reaching("creating the table"):
            catalog.create_namespace_if_not_exists(self.namespace)
            return catalog.create_table_if_not_exists(self.identifier, schema=schema)


def no_retry(table: Table) -> Table:
    """A view of ``table`` whose transactions fail on a concurrent change instead of being rebased
    by pyiceberg (module docstring). pyiceberg reads its retry count from the properties of the
    table object a transaction starts from; the view's copy says 0 and is never written back (a
    commit sends only its own updates)."""
    from pyiceberg.table import Table as IcebergTable
    from pyiceberg.table import TableProperties

    metadata: Any = table.metadata
    properties = {**metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    view_metadata = metadata.model_copy(update={"properties": properties})
    return IcebergTable(
        table.name(), view_metadata, table.metadata_location, table.io, table.catalog, table.config
    )
