"""S4 at scale (``bench.restore_scale``) on a tiny state: the checkpoint it builds is a real one
that restores every entry it wrote, through the columnar window operator."""

from __future__ import annotations

from pathlib import Path

from bench.restore_scale import run


def test_the_built_checkpoint_restores_every_entry(tmp_path: Path) -> None:
    data = run(tmp_path.as_uri(), keys=3_000, windows=4, repeat=1)
    best = data["best"]
    assert data["entries"] == best["entries"] == 12_000
    assert best["restore_columnar"] and best["files"] >= 2  # one subtask's share each, at least
    assert best["read_s"] > 0 and best["open_s"] > 0
    assert best["restore_s"] >= best["read_s"]
