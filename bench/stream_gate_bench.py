"""Throughput micro-benchmark of a subtask's input path: gate + barrier handler + watermark valve.

Not a timed test: run it by hand and commit the result file.

    .venv/bin/python bench/stream_gate_bench.py            # 1M chunks, writes bench/results/stream_gate.md
    .venv/bin/python bench/stream_gate_bench.py --chunks 100000 --no-write

Workload: 8 channels carrying 1,000,000 small record chunks in total (Arrow record batches of 8 rows
when pyarrow is installed, reused from a pool of 64 so that building the input does not dominate),
a barrier every ``--barrier-every`` chunks per channel and a watermark every ``--watermark-every``
chunks per channel. In the *skewed* rows each channel's epochs have different lengths (±50 %), so the
aligner really blocks channels while it waits for the slow ones. Channels are filled before the clock
starts; the timed loop is ``poll_next`` plus dispatch of watermarks to the valve, as a subtask does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from state_store.core.stream import (
    END_OF_PARTITION,
    BarrierAbortReason,
    CheckpointBarrier,
    CheckpointedInputGate,
    CheckpointMetrics,
    CheckpointOptions,
    ScriptedChannel,
    StatusWatermarkValve,
    StreamStatus,
    Watermark,
    create_barrier_handler,
)

RESULTS = Path(__file__).resolve().parent / "results" / "stream_gate.md"


def make_chunk_pool(size: int) -> tuple[list[object], str]:
    try:
        import pyarrow as pa
    except ImportError:  # the core never needs pyarrow; the benchmark only uses it for realistic payloads
        return [tuple(range(i, i + 8)) for i in range(size)], "tuple of 8 ints"
    pool: list[object] = [
        pa.record_batch({"key": pa.array(range(i, i + 8)), "value": pa.array([float(i)] * 8)})
        for i in range(size)
    ]
    return pool, f"pyarrow {pa.__version__} RecordBatch, 8 rows x 2 columns"


def epoch_sizes(total: int, every: int, skewed: bool, rng: random.Random) -> list[int]:
    """Split ``total`` chunks of one channel into epochs of about ``every`` chunks."""
    sizes: list[int] = []
    left = total
    while left > 0:
        size = every if not skewed else max(1, int(every * rng.uniform(0.5, 1.5)))
        size = min(size, left)
        sizes.append(size)
        left -= size
    return sizes


def build_channels(
    num_channels: int, chunks: int, barrier_every: int, watermark_every: int, skewed: bool, pool: list[object]
) -> tuple[list[ScriptedChannel], int, int]:
    """Return filled channels, the number of checkpoints and the total number of items."""
    rng = random.Random(42)
    per_channel = [
        chunks // num_channels + (1 if c < chunks % num_channels else 0) for c in range(num_channels)
    ]
    plans = [epoch_sizes(per_channel[c], barrier_every, skewed, rng) for c in range(num_channels)]
    num_checkpoints = max(len(plan) for plan in plans)
    options = CheckpointOptions()
    channels: list[ScriptedChannel] = []
    total_items = 0
    for c, plan in enumerate(plans):
        plan = plan + [0] * (num_checkpoints - len(plan))  # every channel carries every barrier
        items: list[object] = []
        event_time = 0
        emitted = 0
        for epoch, size in enumerate(plan, start=1):
            for _ in range(size):
                items.append(pool[(emitted + c) % len(pool)])
                emitted += 1
                event_time += 10
                if emitted % watermark_every == 0:
                    items.append(Watermark(event_time - 1))
            items.append(CheckpointBarrier(epoch, 0, options))
        items.append(END_OF_PARTITION)
        total_items += len(items)
        channels.append(ScriptedChannel(items))
    return channels, num_checkpoints, total_items


class CountingListener:
    def __init__(self) -> None:
        self.triggered = 0
        self.aborted = 0

    def trigger_checkpoint_on_barrier(
        self, checkpoint_id: int, timestamp: int, options: CheckpointOptions, metrics: CheckpointMetrics
    ) -> None:
        self.triggered += 1

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: BarrierAbortReason) -> None:
        self.aborted += 1


class CountingOutput:
    def __init__(self) -> None:
        self.watermarks = 0
        self.last = 0

    def emit_watermark(self, watermark: Watermark) -> None:
        self.watermarks += 1
        self.last = watermark.timestamp

    def emit_stream_status(self, status: StreamStatus) -> None:
        pass


class CountingChannelState:
    def __init__(self) -> None:
        self.items = 0

    def add_input_data(self, checkpoint_id: int, channel: int, item: object) -> None:
        self.items += 1

    def finish_input(self, checkpoint_id: int) -> None:
        pass


@dataclass(frozen=True)
class Result:
    mode: str
    skewed: bool
    chunks: int
    items: int
    checkpoints: int
    triggered: int
    watermarks_out: int
    channel_state_items: int
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.items / self.seconds

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds


def run_once(mode: str, skewed: bool, args: argparse.Namespace, pool: list[object]) -> Result:
    channels, num_checkpoints, total_items = build_channels(
        args.channels, args.chunks, args.barrier_every, args.watermark_every, skewed, pool
    )
    listener = CountingListener()
    writer = CountingChannelState()
    handler = create_barrier_handler(
        mode,
        args.channels,
        listener,
        channel_state_writer=writer,
        now_ns=time.monotonic_ns,
        now_ms=time.time_ns,
    )
    gate = CheckpointedInputGate(channels, handler)
    output = CountingOutput()
    valve = StatusWatermarkValve(args.channels, output)

    poll_next = gate.poll_next
    input_watermark = valve.input_watermark
    input_status = valve.input_stream_status
    chunks = items = 0
    start = time.perf_counter()
    while True:
        polled = poll_next()
        if polled is None:
            if gate.is_finished():
                break
            raise RuntimeError("gate stalled before the end of input: a handler bug")
        items += 1
        channel, item = polled
        kind = item.__class__
        if kind is Watermark:
            input_watermark(item, channel)  # type: ignore[arg-type]
        elif kind is StreamStatus:
            input_status(item, channel)  # type: ignore[arg-type]
        elif kind is not CheckpointBarrier and item is not END_OF_PARTITION:
            chunks += 1
    seconds = time.perf_counter() - start
    if chunks != args.chunks or items != total_items:
        raise RuntimeError(
            f"lost data: {chunks} chunks / {items} items, expected {args.chunks} / {total_items}"
        )
    if listener.triggered != num_checkpoints:
        raise RuntimeError(f"{listener.triggered} checkpoints triggered, expected {num_checkpoints}")
    return Result(
        mode,
        skewed,
        chunks,
        items,
        num_checkpoints,
        listener.triggered,
        output.watermarks,
        writer.items,
        seconds,
    )


def machine_info() -> list[tuple[str, str]]:
    return [
        ("date (UTC)", dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")),
        ("nproc", str(os.cpu_count())),
        ("python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("platform", platform.platform()),
        ("processor", platform.machine()),
        ("load average (1/5/15 min) at the end", " / ".join(f"{x:.2f}" for x in os.getloadavg())),
    ]


def render(results: list[Result], args: argparse.Namespace, payload: str) -> str:
    lines = [
        "# Stream gate throughput (`bench/stream_gate_bench.py`)",
        "",
        "Input path of one subtask: `CheckpointedInputGate.poll_next` + barrier handler + "
        "`StatusWatermarkValve`, single thread.",
        "",
        "| machine | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in machine_info()],
        "",
        f"Workload: {args.channels} channels, {args.chunks:,} chunks ({payload}), a barrier every "
        f"{args.barrier_every} chunks and a watermark every {args.watermark_every} chunks per channel. "
        f"Best of {args.repeat} runs per row. "
        "*Skewed*: epoch lengths vary ±50 % per channel, so the aligner blocks channels. "
        "Events = chunks + watermarks + barriers + end-of-partition handed out by the gate.",
        "",
        "| mode | skewed | checkpoints | watermarks out | channel-state items | seconds | events/s "
        "| chunks/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.mode} | {'yes' if r.skewed else 'no'} | {r.triggered} | {r.watermarks_out:,} | "
            f"{r.channel_state_items:,} | {r.seconds:.2f} | {r.events_per_s:,.0f} | {r.chunks_per_s:,.0f} |"
        )
    lines += [
        "",
        "Timings are wall-clock on the machine above; with other jobs running (see the load average) a row",
        "can move by ±40 % between runs. Read the order of magnitude: about 1 µs per item handed out.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--barrier-every", type=int, default=1_000)
    parser.add_argument("--watermark-every", type=int, default=100)
    parser.add_argument("--modes", default="exactly_once,at_least_once,unaligned")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the fastest is reported")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)

    pool, payload = make_chunk_pool(64)
    results: list[Result] = []
    for mode in args.modes.split(","):
        for skewed in (False, True):
            result = min(
                (run_once(mode, skewed, args, pool) for _ in range(args.repeat)), key=lambda r: r.seconds
            )
            print(
                f"{mode:14s} skewed={skewed!s:5s} {result.seconds:6.2f} s  "
                f"{result.events_per_s:12,.0f} events/s  {result.chunks_per_s:12,.0f} chunks/s",
                flush=True,
            )
            results.append(result)
    table = render(results, args, payload)
    if args.no_write:
        print(table)
    else:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(table, encoding="utf-8")
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
