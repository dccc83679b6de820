"""Results of one scenario run: JSON + a Markdown table in ``bench/results/``, PNG charts.

Invariant: every file names the scenario and the sizes actually used (``--events/--keys/--epochs``),
so a reduced run can never be mistaken for the full-size one.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{os.cpu_count()} cores (shared with other engineers' test runs; load average {load:.1f} at the "
        f"end), Python {platform.python_version()}, {platform.platform()}; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )


def table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return str(v)

    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


def write(name: str, data: dict[str, Any], lines: list[str], out_dir: Path = RESULTS) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    md = out_dir / f"{name}.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def chart_epochs(name: str, runs: list[dict[str, Any]], out_dir: Path = RESULTS) -> list[Path]:
    """Per-epoch throughput (events/s) and checkpoint bytes written / duration, one line per engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for run in runs:
        epochs = run["epochs"]
        xs = [e["epoch"] for e in epochs]
        axes[0].plot(
            xs, [e["events"] / max(e["seconds"], 1e-9) for e in epochs], marker="o", label=run["engine"]
        )
        axes[1].plot(xs, [e.get("written_bytes", 0) / 1e6 for e in epochs], marker="o", label=run["engine"])
        axes[2].plot(xs, [e.get("checkpoint_s", 0.0) for e in epochs], marker="o", label=run["engine"])
    for ax, title in zip(
        axes, ["throughput (events/s)", "checkpoint bytes written (MB)", "checkpoint duration (s)"]
    ):
        ax.set_title(title)
        ax.set_xlabel("epoch / micro-batch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(name)
    fig.tight_layout()
    path = out_dir / f"{name}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return [path]
