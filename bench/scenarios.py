"""Scenario runners S1-S6 (see ``bench/__main__.py``). Each returns the Markdown results path.

Fairness rules: both engines read the same generated records with the same epoch boundaries; the
peer's SparkSession is ``local[2]`` (the settings of ``get_spark``) and is warmed up on a small input
before anything is timed; runs alternate ``ours, hdfs, rocksdb`` ``--repeat`` times and the best
run of each engine is compared (the least disturbed by the other tenants of the machine).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench import report
from bench.engines import compare_windows, run_epochal, run_peer
from bench.gen import EventSpec, write_inputs
from bench.peer_state_scale import PEER_DRIVER_MEMORY
from state_store.storage import open_store


@dataclass(frozen=True)
class Sizes:
    events: int
    keys: int
    epochs: int
    repeat: int = 1
    peer: bool = True


def _spec(sizes: Sizes) -> EventSpec:
    per_epoch = sizes.events // sizes.epochs
    per_epoch -= per_epoch % 2
    if per_epoch < 2:
        raise ValueError(f"--events {sizes.events} over --epochs {sizes.epochs} leaves no events per epoch")
    return EventSpec(per_epoch, max(1, sizes.keys), sizes.epochs)


def _workdir(tag: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"epochal-bench-{tag}-"))


def _spark() -> Any:
    from spark_jobs.runtime.spark_session import get_spark

    spark = get_spark("local[2]", "epochal-bench")
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _warm_up(spark: Any, root: Path) -> None:
    spec = EventSpec(20_000, 1_000, 2)
    write_inputs(spec, open_store((root / "warm-store").as_uri()), root / "warm-in")
    for provider in ("hdfs", "rocksdb"):
        run_peer(spec, spark, root / "warm-in", root / f"warm-{provider}", provider)
    # the same courtesy for ours: Spark's Python workers started, modules imported
    run_epochal(spec, (root / "warm-store").as_uri(), job_id="warm-up", executor="spark", spark=spark)


def _summary(run: dict[str, Any], total: int) -> dict[str, Any]:
    epochs = run["epochs"]
    return {
        "engine": run["engine"],
        "wall_s": run["wall_s"],
        "events_per_s": total / run["wall_s"],
        "checkpoint_s_mean": statistics.fmean(e.get("checkpoint_s", 0.0) for e in epochs) if epochs else 0,
        "written_bytes_mean": statistics.fmean(e.get("written_bytes", 0) for e in epochs) if epochs else 0,
        "epochs": epochs,
    }


# -- S1 / S2 / S4: the windowed aggregation ------------------------------------------------------
def run_windowed(sizes: Sizes, out: Path | None) -> Path:
    spec = _spec(sizes)
    root = _workdir("s1")
    store_root = root / "store"
    store_root.mkdir()
    inputs = write_inputs(spec, open_store(store_root.as_uri()), root / "peer-in")
    spark = _spark() if sizes.peer else None
    if spark is not None:
        _warm_up(spark, root)
    # Ours on Spark (the default executor: subtasks on both cores, warm Python workers) and in
    # process (one core, no Spark); the ratios are those of the Spark path, the deployed default.
    ours_engines = ["epochal-spark", "epochal-local"] if spark is not None else ["epochal-local"]
    primary = ours_engines[0]
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in [*ours_engines, "peer-hdfs", "peer-rocksdb"]}
    last: dict[str, dict[str, Any]] = {}
    for r in range(sizes.repeat):
        for name in ours_engines:
            executor = name.split("-")[1]
            ours = run_epochal(
                spec, store_root.as_uri(), job_id=f"s1-{executor}-r{r}", executor=executor, spark=spark
            )
            runs[name].append(_summary(ours, spec.total))
            last[name] = ours
        if spark is not None:
            for provider in ("hdfs", "rocksdb"):
                work = root / f"r{r}"
                peer = run_peer(spec, spark, root / "peer-in", work, provider)
                runs[f"peer-{provider}"].append(_summary(peer, spec.total))
                last[f"peer-{provider}"] = peer
    best = {name: max(rs, key=lambda s: s["events_per_s"]) for name, rs in runs.items() if rs}
    ours_best = best[primary]
    checks = {
        f"{name} vs {peer}": compare_windows(last[name]["windows"], last[peer]["windows"])
        for name in ours_engines
        for peer in ("peer-hdfs", "peer-rocksdb")
        if peer in last
    }
    ratios = {
        f"{name} / {peer}": best[name]["events_per_s"] / b["events_per_s"]
        for name in ours_engines
        for peer, b in best.items()
        if peer.startswith("peer-")
    }
    # S2: the same input as ONE epoch (one checkpoint at the end) = checkpointing (almost) disabled
    executor = primary.split("-")[1]
    one = run_epochal(
        spec, store_root.as_uri(), job_id="s2-one-epoch", epochs=1, executor=executor, spark=spark
    )
    s2 = _s2(ours_best, one, spec)
    s4 = _s4(last, primary, spec, store_root, root, spark)
    data = {
        "scenario": "s1",
        "sizes": {"events": spec.total, "keys": spec.keys, "epochs": spec.epochs, "repeat": sizes.repeat},
        "inputs": inputs,
        "best": {n: {k: v for k, v in b.items() if k != "epochs"} for n, b in best.items()},
        "runs": runs,
        "primary": primary,
        "ratios": ratios,
        "identical_windows": checks,
        "s2": s2,
        "s4": s4,
    }
    out_dir = out or report.RESULTS
    report.chart_epochs("s1", [{"engine": n, "epochs": b["epochs"]} for n, b in best.items()], out_dir)
    lines = _s1_markdown(data, spec)
    md = report.write("s1", data, lines, out_dir)
    report.write("s2", {"scenario": "s2", **s2}, _s2_markdown(s2, spec), out_dir)
    report.write("s4", {"scenario": "s4", **s4}, _s4_markdown(s4, spec), out_dir)
    if spark is not None:
        spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    return md


def _s1_markdown(data: dict[str, Any], spec: EventSpec) -> list[str]:
    rows = [
        [n, b["events_per_s"], b["wall_s"], b["checkpoint_s_mean"], int(b["written_bytes_mean"])]
        for n, b in data["best"].items()
    ]
    lines = [
        "# S1 windowed aggregation: Epochal vs Spark Structured Streaming",
        "",
        f"Per-user 10 s tumbling event-time windows, count + sum, watermark delay {spec.jitter_ms} ms; "
        f"{spec.total:,} events, {spec.keys:,} keys, {spec.epochs} epochs (= micro-batches, "
        f"`maxFilesPerTrigger={spec.partitions}`), exactly-once, a checkpoint per epoch. "
        f"Best of {data['sizes']['repeat']} interleaved run(s) per engine. Machine: {report.machine()}.",
        "",
        *report.table(
            ["engine", "events/s", "wall s", "checkpoint s / epoch", "bytes written / epoch"], rows
        ),
        "",
        f"`epochal-spark` runs the epoch on the same Spark session as the peer (`local[2]`, the "
        "default `EPOCHAL_EXECUTOR=spark`); `epochal-local` runs the same subtasks in process, one "
        f"after the other, on one core. Headline: **{data['primary']}**.",
        "",
        "Ratios (Epochal events/s ÷ peer events/s): "
        + ", ".join(f"{n}: **{r:.2f}x**" for n, r in data["ratios"].items()),
        "",
        "Closed windows compared (count and sum per user and window, both engines):",
        "",
        *report.table(
            ["engines", "ours closed", "peer closed", "both closed", "mismatched", "identical"],
            [
                [n, c["ours_closed"], c["peer_closed"], c["both_closed"], c["mismatched"], c["identical"]]
                for n, c in data["identical_windows"].items()
            ],
        ),
        "",
        "![per-epoch throughput and checkpoints](s1.png)",
    ]
    return lines


def _s2(ours: dict[str, Any], one: dict[str, Any], spec: EventSpec) -> dict[str, Any]:
    epochs = ours["epochs"]
    total = sum(e["seconds"] for e in epochs)
    parts = {
        k: sum(e[k] for e in epochs)
        for k in (
            "restore_s",
            "snapshot_sync_s",
            "upload_wait_s",
            "complete_s",
            "notify_s",
            "trigger_s",
            "retention_s",
        )
    }
    checkpoint = parts["snapshot_sync_s"] + parts["upload_wait_s"] + parts["complete_s"]
    return {
        "epochs": spec.epochs,
        "epoch_seconds_total": total,
        "parts_s": parts,
        "checkpoint_share": checkpoint / total if total else 0.0,
        "checkpoint_plus_restore_share": (checkpoint + parts["restore_s"]) / total if total else 0.0,
        "one_epoch_seconds": one["wall_s"],
        "enabled_vs_disabled_ratio": total / one["wall_s"],
    }


def _s2_markdown(s2: dict[str, Any], spec: EventSpec) -> list[str]:
    parts = s2["parts_s"]
    return [
        "# S2 checkpoint overhead (Epochal, from the S1 run)",
        "",
        f"{spec.total:,} events, {spec.keys:,} keys. `enabled` = {spec.epochs} epochs with a checkpoint "
        "each; "
        "`disabled` = the same input as one epoch (one checkpoint at the end: our closest equivalent, since "
        "state only crosses epochs through checkpoints). Machine: " + report.machine() + ".",
        "",
        *report.table(
            ["phase", "seconds (all epochs)", "share of epoch time"],
            [[k, v, v / s2["epoch_seconds_total"]] for k, v in parts.items()],
        ),
        "",
        "- checkpoint share (synchronous snapshot + upload wait + complete): "
        f"**{s2['checkpoint_share']:.1%}**",
        f"- including the restore at the start of each epoch: {s2['checkpoint_plus_restore_share']:.1%}",
        f"- {spec.epochs} checkpointed epochs vs one epoch: {s2['epoch_seconds_total']:.2f} s vs "
        f"{s2['one_epoch_seconds']:.2f} s = **{s2['enabled_vs_disabled_ratio']:.2f}x**",
    ]


def _s4(
    last: dict[str, Any], primary: str, spec: EventSpec, store_root: Path, root: Path, spark: Any
) -> dict[str, Any]:
    from bench.restore import floor_and_restore, peer_restart

    ours = last[primary]
    result: dict[str, Any] = floor_and_restore(store_root.as_uri(), ours["job"])
    if spark is not None:
        result["peer_restart_s"] = {
            name: peer_restart(spec, spark, root, Path(last[name]["checkpoint_dir"]), name.split("-")[1])
            for name in ("peer-hdfs", "peer-rocksdb")
            if name in last
        }
    return result


def _s4_markdown(s4: dict[str, Any], spec: EventSpec) -> list[str]:
    lines = [
        "# S4 restore (the state of the last S1 checkpoint)",
        "",
        f"State: {s4['state_bytes']:,} bytes in {s4['files']} files ({s4['entries']:,} entries), "
        f"{spec.keys:,} keys. Machine: {report.machine()}.",
        "",
        *report.table(
            ["what", "seconds"],
            [
                ["pyarrow floor (get + verify-free IPC read of the same files)", s4["floor_s"]],
                [
                    "verified floor (the same + the files' BLAKE3, one thread)",
                    s4["verified_floor_s"],
                ],
                [
                    "the same + SHA-256 instead (what format 1 verified), one thread",
                    s4["sha256_floor_s"],
                ],
                [
                    "Epochal restore (fetch, verify size + BLAKE3, decode, open the window operator"
                    + (": columnar accumulators)" if s4.get("restore_columnar") else ")"),
                    s4["restore_s"],
                ],
                *(
                    [["the same files into the heap backend (other operators)", s4["heap_restore_s"]]]
                    if "heap_restore_s" in s4
                    else []
                ),
                *[
                    [f"peer restart ({n}): new query, one tiny batch", v]
                    for n, v in s4.get("peer_restart_s", {}).items()
                ],
            ],
        ),
        "",
        f"Restore / floor = **{s4['restore_s'] / max(s4['floor_s'], 1e-9):.2f}x**; read (fetch, "
        f"verify, decode) / floor = {s4['read_s'] / max(s4['floor_s'], 1e-9):.2f}x",
    ]
    return lines


def run_s3(sizes: Sizes, out: Path | None) -> Path:
    from bench.incremental import run as incremental

    data = incremental(sizes.keys, max(2, sizes.epochs))
    lines = [
        "# S3 incremental checkpoints",
        "",
        f"{sizes.keys:,} keys of keyed state; epoch 1 writes all, each later epoch updates 1% of the keys. "
        f"Machine: {report.machine()}.",
        "",
        *report.table(
            [
                "checkpoint",
                "records",
                "full state bytes",
                "written bytes",
                "written / full",
                "checkpoint s",
                "epoch s",
            ],
            [
                [
                    r["epoch"],
                    r["events"],
                    r["state_bytes"],
                    r["written_bytes"],
                    r["ratio"],
                    r["checkpoint_s"],
                    r["seconds"],
                ]
                for r in data["epochs"]
            ],
        ),
        "",
        f"Steady state mean written / full: **{data['steady_ratio']:.2%}**",
    ]
    out_dir = out or report.RESULTS
    report.chart_epochs("s3", [{"engine": "epochal", "epochs": data["epochs"]}], out_dir)
    return report.write("s3", {"scenario": "s3", **data}, lines, out_dir)


def run_s5(sizes: Sizes, out: Path | None) -> Path:
    from bench.fixed_cost import run as fixed

    data = fixed(max(1, sizes.epochs))
    if sizes.peer:  # --no-peer also skips Airflow (minutes of CLI start-ups)
        from bench.airflow_cost import run as through_airflow

        data["airflow"] = through_airflow(3)
    lines = [
        "# S5 fixed cost per epoch with empty input",
        "",
        f"A forced epoch with no new records (trigger + run + complete + notify + retention), in process, "
        f"S1's job shape. Machine: {report.machine()}.",
        "",
        *report.table(["step", "median seconds"], [[k, v] for k, v in data["median_s"].items()]),
        "",
        f"Median total: **{data['median_s']['total']:.3f} s** over {len(data['samples'])} epochs.",
    ]
    if "airflow" in data:
        airflow = data["airflow"]["samples_s"]
        lines += [
            "",
            "Through Airflow (`airflow dags test epochal_clickstream`, SQLite, in-process executor; includes "
            "the CLI start-up and DAG parsing):",
            "",
            *report.table(
                ["input", "median seconds", "runs"],
                [[k, statistics.median(v), len(v)] for k, v in airflow.items()],
            ),
        ]
    return report.write("s5", {"scenario": "s5", **data}, lines, out or report.RESULTS)


def run_s6(sizes: Sizes, out: Path | None) -> Path:
    from bench.coordinator_scale import run as scale

    acks = sizes.keys or 1024
    variants = [
        scale(acks, max(1, sizes.epochs), deep_verify=deep, bundled=bundled)
        for bundled in (True, False)
        for deep in (False, True)
    ]
    lines = [
        "# S6 coordinator scale against SeaweedFS S3",
        "",
        f"A checkpoint with {acks:,} expected acks (uploaded before the clock starts), completed "
        "by the coordinator against a real SeaweedFS S3 server on loopback, in the default mode "
        "(`deep_verify=False`: every state file's presence and size from the folder listings, its "
        "checksum the writer's, from the ack; issue 20) and with the opt-in `deep_verify=True` "
        "(every state file read back and checked against its BLAKE3 checksum before the decision; "
        "the default before issue 20, then with SHA-256, as `verify_sha256=True`); `bundled`: "
        "the acks are also in one ack bundle, as an epoch run's driver writes it (the default "
        "since session 5), or not (each ack read on its own, as before). "
        f"Machine: {report.machine()}.",
        "",
        *report.table(
            ["bundled", "deep_verify", "run", "complete s", "S3 requests", "requests / ack"],
            [
                [
                    data["bundled"],
                    data["deep_verify"],
                    i + 1,
                    r["seconds"],
                    r["requests"],
                    r["requests"] / acks,
                ]
                for data in variants
                for i, r in enumerate(data["runs"])
            ],
        ),
        "",
        *(
            f"Requests by operation (bundled={data['bundled']}, deep_verify={data['deep_verify']}, "
            "last run): "
            + ", ".join(f"{k}: {v}" for k, v in sorted(data["runs"][-1]["by_operation"].items()))
            + "  "
            for data in variants
        ),
    ]
    result = {"scenario": "s6", "acks": acks, "variants": variants}
    return report.write("s6", result, lines, out or report.RESULTS)


def _s4big_peer(sizes: Sizes, root: Path) -> list[dict[str, Any]]:
    """The peer restarted on the same users x windows of open window state, each provider in turn;
    a provider that fails (its heap, its time) is recorded with the error instead of the result."""
    from bench.peer_state_scale import build_and_restart
    from spark_jobs.runtime.spark_session import get_spark

    spark = get_spark("local[2]", "epochal-bench", conf={"spark.driver.memory": PEER_DRIVER_MEMORY})
    spark.sparkContext.setLogLevel("ERROR")
    out: list[dict[str, Any]] = []
    try:
        for provider in ("rocksdb", "hdfs"):  # a driver out of heap (HDFS-backed) ends the session
            try:
                out.append(build_and_restart(spark, root / "peer", sizes.keys, sizes.epochs, provider))
            except Exception as error:
                out.append({"provider": provider, "error": f"failed: {type(error).__name__}: {error}"[:300]})
    finally:
        spark.stop()
    return out


def run_s4big(sizes: Sizes, out: Path | None) -> Path:
    from bench.restore_scale import run as restore_scale

    root = _workdir("s4big")
    try:
        data = restore_scale((root / "store").as_uri(), sizes.keys, sizes.epochs, repeat=max(2, sizes.repeat))
        data["peer"] = _s4big_peer(sizes, root) if sizes.peer else []
    finally:
        shutil.rmtree(root, ignore_errors=True)
    best = data["best"]
    lines = [
        "# S4 at about 1 GB: restoring window state vs the pyarrow read floor",
        "",
        f"{data['entries']:,} window accumulators ({data['keys']:,} users x {data['windows']} open windows, "
        f"count + sum), {best['state_bytes']:,} bytes in {best['files']} state files written by the "
        f"snapshot path in {data['write_s']:.1f} s. Restored over every key group, key-group cache "
        f"cleared first (a restarted subtask). Best of {len(data['runs'])} runs. "
        f"Machine: {report.machine()}.",
        "",
        *report.table(
            ["what", "seconds", "x floor", "x verified floor"],
            [
                [
                    name,
                    seconds,
                    seconds / max(best["floor_s"], 1e-9),
                    seconds / max(best["verified_floor_s"], 1e-9),
                ]
                for name, seconds in [
                    ["pyarrow floor (get + IPC read of every file, no checksum)", best["floor_s"]],
                    [
                        "verified floor (the same + BLAKE3 of every file, one thread)",
                        best["verified_floor_s"],
                    ],
                    [
                        "the same + SHA-256 instead (what format 1 verified), one thread",
                        best["sha256_floor_s"],
                    ],
                    ["Epochal read: fetch, verify size + BLAKE3, decode (every core)", best["read_s"]],
                    [
                        "window operator open: one run per window, key-group slices concatenated",
                        best["open_s"],
                    ],
                    ["Epochal restore = read + open", best["restore_s"]],
                    *(
                        [
                            f"peer restart ({p['provider']}): new query on its checkpoint, one tiny batch",
                            p["restart_s"],
                        ]
                        for p in data["peer"]
                        if "restart_s" in p
                    ),
                ]
            ],
        ),
        "",
        "Every run (the best is the one with the shortest restore): "
        + "; ".join(
            f"read {r['read_s']:.3f} s = {r['read_s'] / max(r['floor_s'], 1e-9):.2f}x its floor "
            f"({r['floor_s']:.3f} s), open {r['open_s']:.3f} s"
            for r in data["runs"]
        )
        + ".",
        "",
        *(
            f"Peer ({p['provider']}): "
            + (
                f"{p['state_rows']:,} state rows, {p['state_bytes_on_disk']:,} bytes of checkpoint files, "
                f"{p['state_memory_bytes']:,} bytes in memory (its own count), built by its query in "
                f"{p['build_s']:.0f} s; driver heap {PEER_DRIVER_MEMORY}.  "
                if "restart_s" in p
                else f"{p['error']}  "
            )
            for p in data["peer"]
        ),
    ]
    result = {"scenario": "s4big", **{k: v for k, v in data.items() if k != "best"}, "best": best}
    return report.write("s4big", result, lines, out or report.RESULTS)


RUNNERS = {
    "s1": run_windowed,
    "s2": run_windowed,
    "s4": run_windowed,
    "s3": run_s3,
    "s5": run_s5,
    "s6": run_s6,
    "s4big": run_s4big,
}
_ = (pa, time)
