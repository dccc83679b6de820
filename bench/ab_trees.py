"""A/B of the in-process epoch runtime between two source trees (a refactor must not slow it).

``python -m bench.ab_trees --old /path/to/old/checkout [--repeat 3]`` runs the same workload -- the
clickstream example job (4 partitions, parallelism 2) for ``--epochs`` epochs of ``--rate`` events/s
per partition and 10 s of event time each, ``executor="local"`` -- in a fresh subprocess per tree,
alternating old and new ``--repeat`` times (the machine is shared: ratios from one run, medians).
Only APIs both trees have are used. Results: ``bench/results/ab_trees.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

WORKLOAD = """
import json, sys, tempfile, time
from spark_jobs.examples.clickstream import build_job
from spark_jobs.runtime.cycle import run_cycle
from state_store.testing import ManualClock
rate, epochs = int(sys.argv[1]), int(sys.argv[2])
uri = "file://" + tempfile.mkdtemp(prefix="epochal-ab-")
job = build_job(events_per_second=rate, max_records_per_epoch=10**9)
clock = ManualClock(1_700_000_000_000)
times = []
for _ in range(epochs):
    clock.advance(10_000)
    t0 = time.perf_counter()
    report = run_cycle(job, uri, clock, executor="local")
    times.append(time.perf_counter() - t0)
    assert report.status == "completed", report
print(json.dumps({"epoch_s": times}))
"""


def run_tree(tree: Path, rate: int, epochs: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "plugins")])}
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD, str(rate), str(epochs)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=1800, check=True,
    )  # fmt: skip
    return list(json.loads(out.stdout.strip().splitlines()[-1])["epoch_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab_trees", description=__doc__)
    parser.add_argument("--old", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=HERE, help="default: this checkout")
    parser.add_argument("--rate", type=int, default=5_000, help="events/s per partition")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "bench" / "results")
    args = parser.parse_args(argv)
    runs: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.repeat):
        for name in ("old", "new"):
            epochs = run_tree(getattr(args, name), args.rate, args.epochs)
            runs[name].append(statistics.median(epochs[1:] or epochs))  # the first epoch warms up
    old, new = statistics.median(runs["old"]), statistics.median(runs["new"])
    commit = {
        n: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=getattr(args, n), capture_output=True,
                          text=True).stdout.strip()
        for n in ("old", "new")
    }  # fmt: skip
    result = {"commit": commit, "rate": args.rate, "epochs": args.epochs, "runs": runs,
              "old_s": old, "new_s": new, "new_over_old": new / old}  # fmt: skip
    events = args.rate * 4 * 10
    md = (
        f"# A/B of the in-process epoch runtime: {commit['old']} (old) vs {commit['new']} (new)\n\n"
        f"Clickstream example, 4 partitions x {args.rate:,} events/s x 10 s = {events:,} events per "
        f"epoch, executor local, {args.epochs} epochs (first one dropped), {args.repeat} alternating "
        "runs per tree.\n\n"
        "| tree | median seconds per epoch | runs |\n|---|---|---|\n"
        f"| old {commit['old']} | {old:.3f} | {', '.join(f'{x:.3f}' for x in runs['old'])} |\n"
        f"| new {commit['new']} | {new:.3f} | {', '.join(f'{x:.3f}' for x in runs['new'])} |\n\n"
        f"new / old = **{new / old:.3f}** (below 1: the new tree is faster).\n"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ab_trees.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "ab_trees.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
