"""The peer's side of S4 at scale (``bench.peer_state_scale``): its input holds exactly the state
Epochal's side builds (every user once in every window, so users x windows open windows)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from bench.engines import WINDOW_MS
from bench.peer_state_scale import restart_extra, write_window_inputs


def test_the_input_puts_every_user_once_in_every_window(tmp_path: Path) -> None:
    write_window_inputs(tmp_path, users=25_000, windows=3)
    files = sorted(tmp_path.glob("*.parquet"))
    assert len(files) == 3
    for w, path in enumerate(files):
        table = pq.read_table(path)
        assert sorted(table.column("user_id").to_pylist()) == list(range(25_000))
        starts = {t // WINDOW_MS * WINDOW_MS for t in table.column("event_time").to_pylist()}
        assert starts == {w * WINDOW_MS}
    extra = restart_extra(25_000)
    assert extra.num_rows == 1_000 and max(extra.column("user_id").to_pylist()) < 25_000
    assert max(extra.column("event_time").to_pylist()) < WINDOW_MS  # an open window: no new state row
