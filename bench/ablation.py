"""What each runtime optimization gained: the S1 job (Epochal only, in process) on the same input,
with the optimizations switched on one at a time, cumulatively, in one process.

Switches (module attributes, all True in production):
  window.INDEXED_FIRING   tumbling/sliding windows fire from the state index, no per-window timers
  window.VECTOR_MERGE     Count/Sum partials merged into accumulators with numpy
  keyed.FAST_CODEC        state files: bulk JSON parse, int fast paths (same bytes)
  keys.CACHE_KEY_GROUPS   process-wide key -> key group cache for the shuffle (warm across epochs)
  gcpause.ENABLED         the cyclic garbage collector paused while a subtask runs
  window.COLUMNAR         Count/Sum windows over int keys kept as numpy columns (``window_columns``)
  keyed.INT_COLUMNS       native state files of int-shaped state in the int64 layout (format v2)
Always on (no switch): the backend's process-wide key-group cache and unrolled ownership check,
shallow copies of flat accumulator lists in snapshots. ``python -m bench.ablation``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench import report
from bench.engines import run_epochal
from bench.gen import EventSpec, write_inputs
from spark_jobs.runtime import gcpause, keys
from spark_jobs.runtime.operators import window
from state_store.formats import keyed
from state_store.storage import open_store

STEPS = [
    ("baseline (all switches off)", {}),
    ("+ timer-free window firing", {"INDEXED_FIRING": True}),
    ("+ vectorized Count/Sum merge", {"VECTOR_MERGE": True}),
    ("+ fast state-file codec", {"FAST_CODEC": True}),
    ("+ key-group cache in the shuffle", {"CACHE_KEY_GROUPS": True}),
    ("+ cyclic GC paused inside subtasks", {"ENABLED": True}),
    ("+ columnar window accumulators", {"COLUMNAR": True}),
    ("+ int64 layout of state files", {"INT_COLUMNS": True}),
]
MODULES = {
    "INDEXED_FIRING": window,
    "VECTOR_MERGE": window,
    "FAST_CODEC": keyed,
    "CACHE_KEY_GROUPS": keys,
    "ENABLED": gcpause,
    "COLUMNAR": window,
    "INT_COLUMNS": keyed,
}


def _set(flags: dict[str, bool]) -> None:
    for name, module in MODULES.items():
        setattr(module, name, flags.get(name, False))


def run(events: int, keys_: int, epochs: int, repeat: int = 2) -> dict[str, Any]:
    """Every step ``repeat`` times, alternating forward and reverse order (the machine is shared:
    a step must not always run in the same noise window); the best run of each step counts."""
    spec = EventSpec(events // epochs // 2 * 2, keys_, epochs)
    root = Path(tempfile.mkdtemp(prefix="epochal-bench-ablation-"))
    (root / "store").mkdir()
    uri = (root / "store").as_uri()
    write_inputs(spec, open_store(uri), root / "peer-in")
    configs: list[dict[str, bool]] = []
    flags: dict[str, bool] = {}
    for _, change in STEPS:
        flags = {**flags, **change}
        configs.append(flags)
    walls: list[list[float]] = [[] for _ in STEPS]
    windows: set[int] = set()
    runs = 0
    try:
        for r in range(repeat):
            order = range(len(STEPS)) if r % 2 == 0 else reversed(range(len(STEPS)))
            for i in order:
                _set(configs[i])
                result = run_epochal(spec, uri, job_id=f"ablation-{runs}")
                runs += 1
                walls[i].append(result["wall_s"])
                windows.add(result["windows"].num_rows)
    finally:
        _set({name: True for name in MODULES})
    if len(windows) != 1:
        raise RuntimeError(f"the steps closed different numbers of windows: {sorted(windows)}")
    rows: list[dict[str, Any]] = []
    for (label, _), samples in zip(STEPS, walls):
        best = min(samples)
        rows.append(
            {
                "step": label,
                "wall_s": best,
                "events_per_s": spec.total / best,
                "samples_s": samples,
                "windows": next(iter(windows)),
            }
        )
    base = rows[0]["events_per_s"]
    for row in rows:
        row["speedup"] = row["events_per_s"] / base
    return {"events": spec.total, "keys": keys_, "epochs": epochs, "repeat": repeat, "steps": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=40_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=report.RESULTS)
    args = parser.parse_args(argv)
    data = run(args.events, args.keys, args.epochs, args.repeat)
    lines = [
        "# Runtime optimizations, one at a time (S1 job, Epochal in process)",
        "",
        f"{data['events']:,} events, {data['keys']:,} keys, {data['epochs']} epochs; each step adds one "
        f"switch to the previous one (see `bench/ablation.py`); best of {data['repeat']} runs per step, "
        f"alternating forward and reverse order. Machine: {report.machine()}.",
        "",
        *report.table(
            ["step", "events/s", "wall s", "speed-up vs baseline", "windows closed"],
            [[r["step"], r["events_per_s"], r["wall_s"], r["speedup"], r["windows"]] for r in data["steps"]],
        ),
    ]
    md = report.write("optimizations", {"scenario": "ablation", **data}, lines, args.out)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
