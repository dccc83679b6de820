"""The ``epochal`` command tree: every command with a one-line summary, every option with its help
and default, the kill points listed where ``--fault`` takes them.

Sub-subcommands (``checkpoints list|show|diff``, ``savepoints list|dispose``, ``lease show|break``)
are parsers of their own, so options may come before or after positional ids
(``checkpoints diff --job J --store S 1 2``).
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_jobs.commands import checkpoints, maintenance, output, running, snapshots
from spark_jobs.commands.common import STORE_ENV
from spark_jobs.commands.parser import EpochalParser, clock_options, fault_spec
from spark_jobs.examples import NAMED_JOBS
from state_store.core import killpoints
from state_store.storage.uri import redact

DESCRIPTION = """\
Flink-style exactly-once checkpoints for Spark micro-batch pipelines, from the command line.

Exit codes: 0 ok, 1 failure, 2 bad usage or input (one line on stderr that says what to change).
--store defaults to $EPOCHAL_STORE_URI; a plain folder such as ./store is a local store.
Every command that changes a job holds the job's lease while it does: a second one fails with one
line naming the holder, or waits with --wait.
"""
EPILOG = "Run 'epochal COMMAND --help' for the options of a command."

FAULT_HELP = (
    "drill: crash the process at this protocol step (exit code 137, as a SIGKILL; "
    "EPOCHAL_FAULT does the same), as KILL_POINT or KILL_POINT@CHECKPOINT_ID; kill points: "
    + ", ".join(killpoints.ALL)
)


def build_parser(env: Mapping[str, str] | None = None) -> EpochalParser:
    """The whole command tree. ``env`` only shows the current ``EPOCHAL_STORE_URI`` in the help."""
    current = (env or {}).get(STORE_ENV)
    store_help = "where the jobs' state is: a folder (./store), file:///abs/path or s3://bucket/prefix " + (
        f"(default: ${STORE_ENV}, now {redact(current)})" if current else f"(default: ${STORE_ENV})"
    )
    parser = EpochalParser(prog="epochal", description=DESCRIPTION, epilog=EPILOG)
    add = parser.add_commands("commands", "command")

    def store(p: EpochalParser) -> None:
        p.add_argument("--store", default=None, metavar="URI", help=store_help)
        p.set_defaults(store_from_env=True)

    def as_json(p: EpochalParser, what: str = "the result") -> None:
        p.add_argument("--json", action="store_true", help=f"print {what} as JSON instead of text")

    def job_id(p: EpochalParser, default: str | None = None) -> None:
        if default is None:
            p.add_argument("--job", required=True, help="job id (as in 'epochal checkpoints list')")
        else:
            p.add_argument("--job", default=default, help=f"job id (default: {default})")

    def job_ref(p: EpochalParser, what: str = "the job to run") -> None:
        p.add_argument(
            "--job",
            dest="job_ref",
            required=True,
            help=f"{what}: an example name ({', '.join(sorted(NAMED_JOBS))}) or package.module:attr",
        )

    def executor(p: EpochalParser, default: str) -> None:
        p.add_argument(
            "--executor",
            choices=["spark", "local"],
            default=default,
            help=f"spark: Spark local[*]; local: in this process, no JVM (default: {default})",
        )

    def time_step(p: EpochalParser, default: int | None = None, what: str = "per epoch") -> None:
        p.add_argument(
            "--time-step-ms",
            type=int,
            default=default,
            metavar="MS",
            help=f"simulated time: advance the clock this much {what}; 0 replays the same input cut "
            + (f"(default: {default})" if default is not None else "(default: the system clock)"),
        )

    def waits(p: EpochalParser) -> None:
        p.add_argument("--wait", action="store_true", help="wait for the job's lease instead of failing")
        p.add_argument(
            "--wait-timeout",
            type=float,
            default=900.0,
            metavar="S",
            help="seconds to wait with --wait (default 900)",
        )

    def fault(p: EpochalParser) -> None:
        p.add_argument("--fault", type=fault_spec, default=None, metavar="KILL_POINT[@ID]", help=FAULT_HELP)

    def max_parallelism(p: EpochalParser) -> None:
        p.add_argument(
            "--max-parallelism",
            type=int,
            default=None,
            help="key groups of the job (default: its job record's; another value is refused)",
        )

    # -- running ---------------------------------------------------------------------------------
    demo = add(
        "demo", "run the example pipeline end to end and show its history and output", running.cmd_demo
    )
    store(demo)
    demo.add_argument("--epochs", type=int, default=5, help="epochs to run (default 5)")
    executor(demo, "spark")
    as_json(demo, "the history and the output")

    run = add("run", "run N epochs of a job: trigger, epoch, complete, notify, retention", running.cmd_run)
    job_ref(run)
    store(run)
    run.add_argument("--epochs", type=int, default=1, help="epochs to run, one after the other (default 1)")
    executor(run, "spark")
    run.add_argument(
        "--mode",
        choices=["exactly_once", "at_least_once", "unaligned"],
        default=None,
        help="override the job's checkpointing mode (default: the job's)",
    )
    clock_options(run, default_help="wall")
    as_json(run, "one status per epoch")
    waits(run)
    fault(run)

    proto = add(
        "protocol-demo", "the checkpoint protocol alone, with simulated tasks", running.cmd_protocol_demo
    )
    store(proto)
    job_id(proto, default="wordcount")
    proto.add_argument("--epochs", type=int, default=5, help="epochs to run (default 5)")
    as_json(proto, "the history")
    fault(proto)

    # -- looking at a job ------------------------------------------------------------------------
    chk = add("checkpoints", "list, show or diff a job's checkpoints")
    chk_add = chk.add_commands("checkpoints commands", "action")
    lst = chk_add(
        "list", "the job's checkpoints; LATEST marks the one the next epoch continues", checkpoints.cmd_list
    )
    job_id(lst)
    store(lst)
    lst.add_argument(
        "--all",
        action="store_true",
        help="the full history from the job's history archive (as the Checkpoints view in Airflow), "
        "including checkpoints retention deleted",
    )
    as_json(lst, "the rows")
    show = chk_add(
        "show", "a summary of one completed checkpoint (--json: its whole metadata)", checkpoints.cmd_show
    )
    job_id(show)
    store(show)
    show.add_argument("checkpoint", nargs="?", type=int, metavar="ID", help="checkpoint id (default: LATEST)")
    show.add_argument("--id", type=int, default=None, help="checkpoint id, as ID (default: LATEST)")
    as_json(show, "the checkpoint's metadata")
    diff = chk_add(
        "diff", "state entries added, removed and changed per operator from A to B", checkpoints.cmd_diff
    )
    diff.add_argument("a", metavar="A", help="checkpoint id or savepoint location")
    diff.add_argument("b", metavar="B", help="checkpoint id or savepoint location")
    job_id(diff)
    store(diff)
    max_parallelism(diff)
    as_json(diff, "the counts")

    out = add("output", "print or export a sink's committed rows", output.cmd_output)
    job_id(out)
    store(out)
    out.add_argument("--sink", default=None, help="sink uid (default: the job's only sink with output)")
    out.add_argument(
        "--format",
        choices=list(output.FORMATS),
        default=None,
        help="table, json, csv or parquet (default: from the --out extension; else table on a terminal, "
        "csv into a pipe)",
    )
    out.add_argument(
        "--out", default=None, metavar="PATH", help="write the rows to this file (default: print)"
    )
    out.add_argument(
        "--all-columns",
        action="store_true",
        help="keep the runtime's columns (_ts, _offset and others starting with _)",
    )
    out.add_argument("--limit", type=int, default=None, metavar="N", help="the first N rows only")
    as_json(out, "the rows (with --out: a summary)")

    val = add(
        "validate",
        "audit stored checkpoints: metadata and every file present with its size",
        maintenance.cmd_validate,
    )
    job_id(val)
    store(val)
    val.add_argument(
        "--deep",
        action="store_true",
        help="read every state file back and check it against its writer's checksum",
    )
    val.add_argument(
        "--checkpoint",
        type=int,
        action="append",
        default=[],
        metavar="ID",
        help="audit only this checkpoint id (repeatable; default: every completed checkpoint)",
    )
    as_json(val, "the audit report")

    rep = add("report", "write a self-contained HTML page of a job's checkpoints", maintenance.cmd_report)
    job_id(rep)
    store(rep)
    rep.add_argument("--out", required=True, metavar="PATH", help="the .html file to write")
    rep.add_argument("--limit", type=int, default=1000, help="history rows, newest first (default 1000)")
    rep.add_argument("--airflow-url", default=None, metavar="URL", help="link DAG runs to this Airflow UI")
    as_json(rep, "a summary")

    lease = add("lease", "show or break the job's lease (who may change the job now)")
    lease_add = lease.add_commands("lease commands", "action")
    for name, summary, func in (
        ("show", "who holds the job's lease, since when, until when", maintenance.cmd_lease_show),
        (
            "break",
            "free the lease, fencing its holder (it can change nothing after)",
            maintenance.cmd_lease_break,
        ),
    ):
        p = lease_add(name, summary, func)
        job_id(p)
        store(p)
        as_json(p, "the lease")

    # -- changing a job --------------------------------------------------------------------------
    ret = add(
        "retention",
        "apply the retention policy: delete old checkpoints and orphan files",
        maintenance.cmd_retention,
    )
    job_id(ret)
    store(ret)
    ret.add_argument("--retain", type=int, default=3, help="completed checkpoints to keep (default 3)")
    ret.add_argument(
        "--grace-ms",
        type=int,
        default=3_600_000,
        metavar="MS",
        help="keep orphan files younger than this (default 1 h)",
    )
    ret.add_argument(
        "--pin",
        type=int,
        action="append",
        default=[],
        metavar="ID",
        help="keep checkpoint ID from retention (repeatable)",
    )
    ret.add_argument(
        "--unpin",
        type=int,
        action="append",
        default=[],
        metavar="ID",
        help="remove the pin of checkpoint ID (repeatable)",
    )
    ret.add_argument("--dry-run", action="store_true", help="print what would be deleted; change nothing")
    as_json(ret, "what was kept and deleted")
    waits(ret)
    fault(ret)

    sp = add(
        "savepoint",
        "take a savepoint (self-contained, canonical Parquet by default)",
        snapshots.cmd_savepoint,
    )
    job_ref(sp, "the job definition")
    store(sp)
    sp.add_argument("--name", required=True, help="savepoint name (letters, digits, - and _)")
    sp.add_argument(
        "--format",
        choices=["parquet", "arrow"],
        default="parquet",
        help="parquet: canonical, portable; arrow: native (default parquet)",
    )
    sp.add_argument("--stop", action="store_true", help="stop-with-savepoint: no epoch runs until a restore")
    executor(sp, "local")
    clock_options(sp, default_help="the job's clock", what="for the savepoint's epoch")
    as_json(sp, "where it was written")
    waits(sp)
    fault(sp)

    sps = add("savepoints", "list or dispose a job's savepoints")
    sps_add = sps.add_commands("savepoints commands", "action")
    sps_list = sps_add("list", "the job's savepoints with their locations", snapshots.cmd_savepoints_list)
    job_id(sps_list)
    store(sps_list)
    as_json(sps_list, "the savepoints")
    dispose = sps_add("dispose", "delete one savepoint", snapshots.cmd_savepoints_dispose)
    job_id(dispose)
    store(dispose)
    dispose.add_argument("--name", required=True, help="the savepoint to delete")
    as_json(dispose, "the number of files deleted")
    waits(dispose)

    rs = add(
        "restore", "restore a job from latest, a checkpoint id or a savepoint location", snapshots.cmd_restore
    )
    job_ref(rs, "the job definition (the new code)")
    store(rs)
    rs.add_argument(
        "--from",
        dest="source",
        default="latest",
        metavar="SOURCE",
        help="latest, a checkpoint id, or a savepoint location (default: latest)",
    )
    rs.add_argument("--dry-run", action="store_true", help="print the restore plan; change nothing")
    rs.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="accept dropping the state of operators the job no longer has",
    )
    rs.add_argument(
        "--uid-map", action="append", default=[], metavar="OLD=NEW", help="a renamed operator (repeatable)"
    )
    rs.add_argument(
        "--parallelism", type=int, default=None, help="new parallelism: rescale (default: the job's)"
    )
    rs.add_argument(
        "--claim-mode",
        choices=["CLAIM", "NO_CLAIM"],
        default="NO_CLAIM",
        help="NO_CLAIM: pin and never modify the snapshot; CLAIM: the job owns it (default NO_CLAIM)",
    )
    rs.add_argument("--allow-foreign", action="store_true", help="accept a snapshot of another job id")
    rs.add_argument("--force", action="store_true", help="restore even if the snapshot fails validation")
    clock_options(rs, default_help="the job's clock", what="before the restored checkpoint")
    as_json(rs, "the plan")
    waits(rs)
    fault(rs)

    bf = add(
        "backfill", "fork a new job from a savepoint and reprocess into its own sinks", snapshots.cmd_backfill
    )
    job_ref(bf, "the job definition to run")
    store(bf)
    bf.add_argument("--from-savepoint", required=True, metavar="LOCATION", help="the savepoint to start from")
    bf.add_argument("--new-job", required=True, help="id of the forked job (its own state and sinks)")
    bf.add_argument(
        "--until-ms", type=int, default=None, metavar="MS", help="stop once event time reaches this"
    )
    bf.add_argument("--epochs", type=int, default=10, help="epochs to run at most (default 10)")
    time_step(bf, default=10_000)
    bf.add_argument(
        "--replace",
        action="store_true",
        help="replace the state of an existing job NEW_JOB (fenced like a restore)",
    )
    as_json(bf, "a summary")
    waits(bf)
    fault(bf)

    ins = add(
        "inspect",
        "write an operator's keyed state at a checkpoint or savepoint to a file",
        snapshots.cmd_inspect,
    )
    job_id(ins)
    store(ins)
    ins.add_argument("--checkpoint", type=int, metavar="ID", help="a checkpoint id (or --savepoint)")
    ins.add_argument("--savepoint", metavar="LOCATION", help="a savepoint location (or --checkpoint)")
    ins.add_argument("--operator", required=True, metavar="UID", help="operator uid")
    ins.add_argument("--key", help="one key only, as JSON (e.g. '\"u1\"'; default: every key)")
    ins.add_argument("--out", required=True, metavar="PATH", help="file.parquet or file.json")
    max_parallelism(ins)
    as_json(ins, "a summary")

    chaos = add(
        "chaos", "seeded random fault schedules checked against the invariants", maintenance.cmd_chaos
    )
    from spark_jobs.chaos.report import add_arguments as chaos_arguments

    chaos_arguments(chaos)
    return parser
