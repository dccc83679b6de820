"""``epochal chaos``: run N seeded schedules and print (or write as Markdown) the summary.

Exit status: 0 when no invariant was violated, 1 otherwise (each violation is printed with the
schedule seed that replays it: ``epochal chaos --replay SEED``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from spark_jobs.chaos.runner import ChaosConfig, ScheduleResult, Summary, reference, run_many
from spark_jobs.chaos.schedule import FAULT_KINDS, generate
from state_store.storage import open_store


class ChaosUsageError(ValueError):
    """A bad ``epochal chaos`` argument (the message names it and the remedy)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedules", type=int, default=50, help="how many random schedules (default 50)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the schedule generator (default 1)")
    parser.add_argument(
        "--store",
        default=None,
        help="run the schedules against this store (file:///dir or s3://bucket/prefix?endpoint_url=...), "
        "each under its own job id; default: a fresh in-memory store per schedule",
    )
    parser.add_argument("--ticks", type=int, default=2, help="faulted epochs per schedule (default 2)")
    parser.add_argument("--replay", type=int, default=None, help="run only the schedule with this seed")
    parser.add_argument("--markdown", default=None, help="also write the summary as Markdown to this file")
    parser.add_argument("--quiet", action="store_true", help="no per-schedule progress lines")
    parser.add_argument(
        "--workers", type=int, default=1, help="forked worker processes (in-memory store only)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    if args.schedules < 1:
        raise ChaosUsageError(f"--schedules {args.schedules} is invalid: use a positive number")
    if args.workers < 1 or (args.workers > 1 and args.store):
        raise ChaosUsageError(f"--workers {args.workers} is invalid: use >= 1, and 1 with --store")
    if args.ticks < 2 or args.ticks > 20:
        raise ChaosUsageError(f"--ticks {args.ticks} is invalid: use 2..20")
    config = ChaosConfig(
        ticks=args.ticks, start_ms=int(time.time() * 1000) if args.store else ChaosConfig.start_ms
    )
    factory = None
    if args.store:
        store = open_store(args.store)  # InvalidStoreURI names the problem
        stamp = int(time.time())

        def factory(index: int) -> tuple[Any, str]:
            return store, f"chaos-{stamp}-{args.seed}-{index}"

    started = time.monotonic()
    reference(config)
    schedules = [generate(args.replay, config.ticks)] if args.replay is not None else None

    def progress(index: int, result: ScheduleResult) -> None:
        if args.quiet and not result.violations:
            return
        faults = ",".join(f"{f.kind}@{f.tick}" for f in result.schedule.faults)
        status = "OK" if not result.violations else "VIOLATION"
        print(
            f"[{index + 1}] seed {result.schedule.seed} {status} {result.seconds:.1f}s "
            f"recovery={result.recovery_runs} faults={faults}",
            flush=True,
        )
        for violation in result.violations:
            print(f"    {violation}", flush=True)

    summary = run_many(
        args.schedules, args.seed, config, store_factory=factory, progress=progress, schedules=schedules
    )
    wall = time.monotonic() - started
    data = summary.as_dict() | {"wall_seconds": round(wall, 1), "ticks": config.ticks}
    print(json.dumps(data, indent=1) if args.json else format_text(data), flush=True)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as fh:
            fh.write(format_markdown(data, sys.argv[1:]))
    return 0 if not summary.violations else 1


def format_text(data: dict[str, Any]) -> str:
    lines = [
        f"schedules: {data['schedules']} (seed {data['seed']}, {data['ticks']} faulted epochs each)",
        f"faults injected: {data['faults_total']}",
        *(f"  {kind}: {count}" for kind, count in data["faults_injected"].items()),
        f"violations: {data['violations']}",
        *(f"  {line}" for line in data["violation_examples"]),
        f"recovery DAG runs after the last fault: p50 {data['recovery_runs_p50']}, "
        f"max {data['recovery_runs_max']}",
        f"time: {data['wall_seconds']} s ({data['seconds_per_schedule']} s per schedule)",
    ]
    return "\n".join(lines)


def format_markdown(data: dict[str, Any], argv: list[str]) -> str:
    fired, armed = data["faults_injected"], data.get("faults_armed", {})
    never = [k for k in FAULT_KINDS if k not in fired]
    rows = "\n".join(f"| `{kind}` | {armed.get(kind, 0)} | {fired.get(kind, 0)} |" for kind in FAULT_KINDS)
    return (
        "# Chaos run\n\n"
        f"Command: `epochal {' '.join(argv)}`\n\n"
        f"- schedules: **{data['schedules']}** (seed {data['seed']}, {data['ticks']} faulted epochs + "
        "1 fault-free epoch each, clickstream example, in-process executor)\n"
        f"- violations: **{data['violations']}**\n"
        f"- recovery (DAG runs from the last fault to the next completed checkpoint): "
        f"p50 **{data['recovery_runs_p50']}**, max **{data['recovery_runs_max']}**\n"
        f"- faults injected (fired, not just armed): **{data['faults_total']}**\n"
        f"- wall time: {data['wall_seconds']} s ({data['seconds_per_schedule']} s per schedule)\n\n"
        "| fault kind | times armed | times fired |\n|---|---|---|\n"
        f"{rows}\n\n" + "A `kill_restore_twice` fires twice per arming; `zombie_coordinator` also fires as "
        "`kill:before_metadata`; an armed S3 fault fires only when a matching request happens "
        "(probability 0.5 per request).\n\n"
        + (f"Armed but never reached in this run: {', '.join(never)}.\n\n" if never else "")
        + (
            "Violations:\n\n" + "\n".join(f"- {v}" for v in data["violation_examples"]) + "\n"
            if data["violations"]
            else ""
        )
    )


def summary_from(results: list[ScheduleResult], seed: int = 0) -> Summary:
    summary = Summary(seed=seed)
    for result in results:
        summary.add(result)
    return summary
