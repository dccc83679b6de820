"""``python -m bench <scenario> [--events N --keys K --epochs E]`` -- Epochal vs Spark Structured
Streaming on the same machine, in the same run, on the same input. Scenarios (see the issue):

  s1  windowed aggregation: events/s of both engines, ratios, identical closed windows
  s2  checkpoint overhead (from the s1 run: checkpoint time as a share of epoch time)
  s3  incremental checkpoints: bytes per checkpoint vs full state, 1% of keys updated per epoch
  s4  restore: Epochal restore vs the pyarrow read floor of the same files vs the peer's restart
  s4big  restore of about 1 GB of window state (--keys users x --epochs open windows) vs the floor
  s5  fixed cost of an epoch with empty input (trigger + run + complete + notify), in process
  s6  coordinator scale: complete a checkpoint of 1,024 acks against SeaweedFS S3
  matrix  workload matrix (issue 20): key/value types, aggregates, windows, lateness, partition
          skew, dedup; each cell vs both Spark peers, results checked row for row (about 10-15
          min on 2 cores at 1M events / 100K keys; ``--events/--keys`` scale it, e.g. 10M / 1M;
          not part of ``all``; ``--cells a,b`` runs some cells only)

Results go to ``bench/results/<scenario>.{json,md,png}``. The machine is shared: absolute numbers
are noisy, so both engines run in the same process, interleaved (``--repeat``), and ratios are
reported. ``--full`` selects the issue's full sizes (10M events / 1M keys / 10 epochs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import scenarios

FULL = {
    "s1": (10_000_000, 1_000_000, 10),
    "s2": (10_000_000, 1_000_000, 10),
    "s3": (0, 10_000_000, 4),
    "s4": (10_000_000, 1_000_000, 10),
}
DEFAULTS = {
    "s1": (1_000_000, 100_000, 10),
    "s2": (1_000_000, 100_000, 10),
    "s3": (0, 300_000, 4),
    "s4": (1_000_000, 100_000, 10),
    "s5": (0, 0, 5),
    "s6": (0, 1024, 3),
    "s4big": (0, 3_000_000, 10),
}
MATRIX = (1_000_000, 100_000, 10)
MATRIX_REPEAT = 2
"""Best of 2 interleaved runs per engine and cell (the JVM's JIT and our workers keep warming up
over the first cells; the default matrix took 10.3 minutes on 2 cores)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenario", choices=[*sorted(DEFAULTS), "matrix", "all"])
    parser.add_argument("--events", type=int, help="total events (s1, s2, s4)")
    parser.add_argument("--keys", type=int, help="distinct keys (s1-s4, s4big); acks for s6")
    parser.add_argument("--epochs", type=int, help="epochs (micro-batches); open windows for s4big")
    parser.add_argument(
        "--repeat", type=int, default=None, help="interleaved repetitions per engine (s1: 1, matrix: 2)"
    )
    parser.add_argument("--full", action="store_true", help="the issue's full sizes (hours on 2 cores)")
    parser.add_argument("--no-peer", action="store_true", help="skip the Spark Structured Streaming peer")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    parser.add_argument("--cells", default="", help="matrix: comma-separated cell names (default: all)")
    args = parser.parse_args(argv)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)  # a new folder: the results are not lost at the end
    if args.scenario == "matrix":
        return _matrix(args)
    names = sorted(DEFAULTS) if args.scenario == "all" else [args.scenario]
    if args.scenario == "all":  # s2 and s4 come out of the s1 run: run it once
        names = [n for n in names if n not in ("s2", "s4")]
    for name in names:
        events, keys, epochs = FULL.get(name, DEFAULTS[name]) if args.full else DEFAULTS[name]
        sizes = scenarios.Sizes(
            events=args.events if args.events is not None else events,
            keys=args.keys if args.keys is not None else keys,
            epochs=args.epochs if args.epochs is not None else epochs,
            repeat=args.repeat if args.repeat is not None else 1,
            peer=not args.no_peer,
        )
        try:
            md = scenarios.RUNNERS[name](sizes, args.out)
        except ValueError as exc:
            print(f"bench {name}: {exc}", file=sys.stderr)
            return 2
        print(md.read_text())
    return 0


def _matrix(args: argparse.Namespace) -> int:
    from bench import matrix

    events, keys, epochs = MATRIX
    sizes = matrix.MatrixSizes(
        events=args.events if args.events is not None else events,
        keys=args.keys if args.keys is not None else keys,
        epochs=args.epochs if args.epochs is not None else epochs,
        repeat=args.repeat if args.repeat is not None else MATRIX_REPEAT,
        peer=not args.no_peer,
        cells=tuple(c.strip() for c in args.cells.split(",") if c.strip()),
    )
    try:
        md = matrix.run(sizes, args.out)
    except ValueError as exc:
        print(f"bench matrix: {exc}", file=sys.stderr)
        return 2
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
