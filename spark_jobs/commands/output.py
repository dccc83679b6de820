"""``epochal output``: a sink's committed rows (only checkpoints that completed), as a table, JSON,
CSV or a Parquet file.

Columns whose name starts with ``_`` (``_ts``, the event time the runtime carries; ``_offset``, a
source position) are the runtime's, not the pipeline's: they are left out unless ``--all-columns``.

Format: ``--format`` if given; else from the ``--out`` file's extension; else JSON with ``--json``;
else a table on a terminal and CSV into a pipe or file redirect.
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from spark_jobs.commands import render
from spark_jobs.commands.common import job_store
from spark_jobs.commands.errors import UsageError

FORMATS = ("table", "json", "csv", "parquet")
_EXTENSIONS = {".parquet": "parquet", ".csv": "csv", ".json": "json"}


def interactive() -> bool:
    """Whether stdout is a terminal (the table is for people; a pipe gets CSV)."""
    return sys.stdout.isatty()


def cmd_output(args: argparse.Namespace) -> int:
    from spark_jobs.runtime.cycle import sink_specs_of_store
    from spark_jobs.sinks import CommitLog, read_committed

    if args.limit is not None and args.limit < 0:
        raise UsageError(f"--limit {args.limit} is invalid: use 0 or more rows")
    fmt = _format(args)
    store = job_store(args)
    sink = _sink(args, sink_specs_of_store(store, args.job), store.uri)
    table = read_committed(store, args.job, sink)
    if not args.all_columns:
        table = table.select([name for name in table.column_names if not name.startswith("_")])
    if args.limit is not None:
        table = table.slice(0, args.limit)
    if args.out is None:
        _print_rows(table, fmt)
        return 0
    path = _write(table, fmt, Path(args.out))
    if args.json:
        checkpoints = [e.checkpoint_id for e in CommitLog(store, args.job, sink).entries()]
        print(
            json.dumps(
                {
                    "path": str(path),
                    "format": fmt,
                    "rows": table.num_rows,
                    "columns": table.column_names,
                    "checkpoints": checkpoints,
                }
            )
        )
    else:
        print(f"wrote {table.num_rows} committed rows of sink {sink} to {path} ({fmt})")
    return 0


def _format(args: argparse.Namespace) -> str:
    if args.format is not None:
        if args.json and args.out is None and args.format != "json":
            raise UsageError(f"--json and --format {args.format} disagree: give one of them")
        if args.format == "parquet" and args.out is None:
            raise UsageError("--format parquet writes a file: add --out PATH.parquet")
        return str(args.format)
    if args.out is not None:
        fmt = _EXTENSIONS.get(Path(args.out).suffix.lower())
        if fmt is None:
            raise UsageError(
                f"--out {args.out!r}: name the format with --format {'|'.join(FORMATS[1:])} or end the "
                "file name in .parquet, .csv or .json"
            )
        return fmt
    if args.json:
        return "json"
    return "table" if interactive() else "csv"


def _sink(args: argparse.Namespace, sinks: list[str], where: str) -> str:
    if args.sink is None:
        if len(sinks) == 1:
            return sinks[0]
        if not sinks:
            raise UsageError(
                f"job {args.job} has no sink with committed output in {where} yet: run an epoch first"
            )
        raise UsageError(
            f"job {args.job} has {len(sinks)} sinks: choose one with --sink ({', '.join(sinks)})"
        )
    if args.sink not in sinks:
        close = difflib.get_close_matches(args.sink, sinks, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UsageError(
            f"sink uid {args.sink!r} (--sink): job {args.job} has no sink of that uid in {where} "
            f"({hint}sinks with output: {', '.join(sinks) or 'none'})"
        )
    return str(args.sink)


def _json_rows(table: Any) -> str:
    return render.dumps(table.to_pylist())


def _csv(table: Any) -> bytes:
    import pyarrow.csv as pacsv

    buffer = io.BytesIO()
    pacsv.write_csv(table, buffer)
    return buffer.getvalue()


def _print_rows(table: Any, fmt: str) -> None:
    if fmt == "json":
        print(_json_rows(table))
    elif fmt == "csv":
        sys.stdout.write(_csv(table).decode())
    elif table.num_columns == 0:
        print("no committed rows yet")
    else:
        import pyarrow as pa

        numeric = [
            i
            for i, f in enumerate(table.schema)
            if pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
        ]
        rows = ([("" if v is None else v) for v in row.values()] for row in table.to_pylist())
        print(render.table(table.column_names, rows, right=numeric))
        print(f"({table.num_rows} rows)")


def _write(table: Any, fmt: str, target: Path) -> Path:
    """Write atomically (a temp file, then a rename): a reader never sees half a file."""
    if fmt == "table":
        raise UsageError("--format table is for the terminal: write a file as --format parquet, csv or json")
    if not target.parent.is_dir():
        raise UsageError(
            f"--out {str(target)!r}: folder {str(target.parent)!r} does not exist; create it first"
        )
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        elif fmt == "csv":
            tmp.write_bytes(_csv(table))
        else:
            tmp.write_text(_json_rows(table) + "\n")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
