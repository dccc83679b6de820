"""The ``epochal`` command line. Exit codes: 0 ok, 1 failure, 2 bad usage or input.

Subcommands so far: ``demo``, ``checkpoints list|show``, ``retention``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime

from state_store.clock import SystemClock
from state_store.core import (
    CheckpointConfig,
    CheckpointSummary,
    InvalidNameError,
    ManifestError,
    ObjectNotFound,
    StoreError,
    apply_retention,
    checkpoint_history,
    load_completed,
)
from state_store.core.codec import to_jsonable
from state_store.core.layout import JobLayout
from state_store.storage import InvalidStoreURI, open_store
from state_store.testing.killpoints import InvalidFaultSpec, kill_switch_from_env


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def _fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_history(rows: Sequence[CheckpointSummary]) -> str:
    header = (
        f"{'id':>5}  {'status':<11} {'triggered (UTC)':<19}  {'duration':>9}  "
        f"{'acks':>7}  {'size':>9}  reason"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        duration = "-" if r.duration_ms is None else f"{r.duration_ms} ms"
        kind = " (savepoint)" if r.savepoint else ""
        lines.append(
            f"{r.checkpoint_id:>5}  {r.status:<11} {_fmt_ms(r.trigger_ms):<19}  {duration:>9}  "
            f"{r.acked:>3}/{r.expected:<3}  {r.state_bytes:>9}  {r.reason}{kind}"
        )
    return "\n".join(lines)


def _cmd_demo(args: argparse.Namespace) -> int:
    from spark_jobs.protocol_demo import run_protocol_demo

    store = open_store(args.store)
    rows = run_protocol_demo(store, args.job, epochs=args.epochs, kill=kill_switch_from_env())
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        print(f"job {args.job} on {store.uri}: {args.epochs} epochs, checkpoint history:")
        print(format_history(rows))
    return 0


def _cmd_checkpoints(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    if args.action == "list":
        rows = checkpoint_history(store, args.job)
        print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else format_history(rows))
        return 0
    if args.id is None:
        raise UsageError("checkpoints show needs --id N: the checkpoint to show")
    cp = load_completed(store, JobLayout(args.job), args.id, deep=True)
    print(json.dumps(to_jsonable(cp.metadata), indent=1))
    return 0


def _cmd_retention(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    config = CheckpointConfig(retained_checkpoints=args.retain, orphan_grace_ms=args.grace_ms)
    plan = apply_retention(
        store, args.job, config, SystemClock(), dry_run=args.dry_run, pinned=frozenset(args.pin)
    )
    report = {
        "retained": list(plan.retained),
        "discarded": list(plan.discarded),
        "deleted_files": len(plan.delete),
        "dry_run": args.dry_run,
    }
    print(
        json.dumps(report)
        if args.json
        else f"retained {report['retained']}, discarded {report['discarded']}, "
        f"{'would delete' if args.dry_run else 'deleted'} {len(plan.delete)} files"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="epochal", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--store", required=True, help="storage URI: file:///path, s3://bucket/prefix, memory://x"
        )
        p.add_argument("--job", default="wordcount", help="job id")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    demo = sub.add_parser("demo", help="run the example pipeline end to end")
    common(demo)
    demo.add_argument("--epochs", type=int, default=5)
    demo.set_defaults(func=_cmd_demo)

    chk = sub.add_parser("checkpoints", help="list or show checkpoints")
    chk.add_argument("action", choices=["list", "show"])
    common(chk)
    chk.add_argument("--id", type=int, help="checkpoint id (show)")
    chk.set_defaults(func=_cmd_checkpoints)

    ret = sub.add_parser("retention", help="apply the retention policy")
    common(ret)
    ret.add_argument("--retain", type=int, default=3)
    ret.add_argument("--grace-ms", type=int, default=3_600_000)
    ret.add_argument("--pin", type=int, action="append", default=[])
    ret.add_argument("--dry-run", action="store_true")
    ret.set_defaults(func=_cmd_retention)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        result: int = args.func(args)
        return result
    except (UsageError, InvalidStoreURI, InvalidNameError, InvalidFaultSpec, ValueError) as exc:
        print(f"epochal: {exc}", file=sys.stderr)
        return 2
    except (ManifestError, ObjectNotFound, StoreError) as exc:
        print(f"epochal: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"epochal: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
