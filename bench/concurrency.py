"""Operators racing on one job, as issue 18 reproduced them, scripted and repeated:
``python -m bench.concurrency --rounds 50`` (results: ``bench/results/concurrency.{md,json}``).

Every round uses a fresh local store and the real CLI (``epochal ... --executor local
--time-step-ms 10000``), processes started concurrently as an operator would:

* **two_runs** -- ``run --epochs 2``, then two ``run --epochs 4`` in the background at once;
* **restore_during_run** -- ``run --epochs 8`` in the background, ``restore --from latest`` once
  the run has completed a checkpoint (odd rounds with ``--wait``: it waits for the lease and
  restores the checkpoint that is latest then), wait, then ``run --epochs 2``;
* **damaged_metadata** -- ``run --epochs 2``, the latest ``_metadata.json`` truncated or one field
  edited (its checksum left stale, or recomputed so its checkpoint id contradicts its folder), then
  ``run`` and ``restore --from latest --dry-run``.

Checked after every round (a failure is recorded with the round's evidence, never retried):

* no duplicate and no lost committed row: ``(page, window_start)`` is unique in the sink's
  committed output, and the output equals a serial run of the same number of completed epochs;
* the chain never forks: within a generation every completed checkpoint continues the one before it;
* every process that lost exited 1 with one line naming the lease (or, for damaged metadata, the
  file), and changed nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEP = ["--executor", "local", "--time-step-ms", "10000"]
SINK = "page-counts-sink"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EPOCHAL_", "AWS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins")])
    return env


def epochal(*args: str) -> list[str]:
    return [sys.executable, "-m", "spark_jobs.cli", *args]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(epochal(*args), capture_output=True, text=True, env=_env(), timeout=600)


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        epochal(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out, err


@dataclass
class Round:
    scenario: str
    index: int
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)
    losers: list[str] = field(default_factory=list)
    completed: int = 0
    duplicates: int = 0
    seconds: float = 0.0

    def fail(self, problem: str) -> None:
        self.ok = False
        self.problems.append(problem)


# -- observations (read only) -------------------------------------------------------------------
def observe(store_uri: str, job_id: str = "clickstream") -> dict[str, Any]:
    """Committed rows, duplicate keys, completed checkpoints and chain forks of a job."""
    from spark_jobs.sinks import read_committed
    from state_store.core import documents
    from state_store.core.codec import ManifestError
    from state_store.core.completed import completed_ids
    from state_store.core.layout import JobLayout
    from state_store.core.manifests import CompletedMetadata
    from state_store.storage import open_store

    store = open_store(store_uri)
    layout = JobLayout(job_id)
    table = read_committed(store, job_id, SINK)
    rows = [(r["page"], r["window_start"], r["count"]) for r in table.to_pylist()] if table.num_rows else []
    keys = Counter((page, start) for page, start, _ in rows)
    metas: list[CompletedMetadata] = []
    for n in completed_ids(store, layout):
        try:
            metas.append(documents.read(store, layout.metadata(n), CompletedMetadata))
        except ManifestError:
            continue
    forks: list[str] = []
    by_base: dict[tuple[int, Any], list[int]] = {}
    for meta in metas:
        if meta.properties.savepoint:
            continue
        by_base.setdefault((meta.generation, meta.positions.get("base")), []).append(meta.checkpoint_id)
    for (generation, base), ids in sorted(by_base.items(), key=lambda kv: repr(kv[0])):
        if len(ids) > 1 and base is not None:
            forks.append(f"generation {generation}: checkpoints {ids} all continue checkpoint {base}")
    return {
        "rows": sorted(rows),
        "duplicates": sum(c - 1 for c in keys.values() if c > 1),
        "completed": len([m for m in metas if not m.properties.savepoint]),
        "forks": forks,
    }


_REFERENCE: dict[int, list[Any]] = {}


def reference_rows(epochs: int) -> list[Any]:
    """The committed rows of a serial run of ``epochs`` completed epochs (cached)."""
    if epochs not in _REFERENCE:
        with tempfile.TemporaryDirectory() as tmp:
            uri = Path(tmp).as_uri()
            done = run("run", "--job", "clickstream", "--store", uri, "--epochs", str(epochs), *STEP)
            if done.returncode != 0:
                raise RuntimeError(f"the serial reference run failed: {done.stderr}")
            _REFERENCE[epochs] = observe(uri)["rows"]
    return _REFERENCE[epochs]


def completed_epochs(*outputs: str) -> int:
    """Epochs the CLI reported completed (retention keeps only the newest checkpoints)."""
    return sum(bool(_COMPLETED.match(line)) for out in outputs for line in out.splitlines())


_COMPLETED = re.compile(r"^epoch -> checkpoint \d+: completed\b")
"""The summary line ``epoch run`` prints per completed epoch (``... completed in 0.4 s; records ...``)."""


def check_output(r: Round, store_uri: str, epochs: int) -> dict[str, Any]:
    seen = observe(store_uri)
    r.completed, r.duplicates = epochs, seen["duplicates"]
    if seen["duplicates"]:
        r.fail(f"{seen['duplicates']} duplicate (page, window_start) rows committed")
    for fork in seen["forks"]:
        r.fail(f"the chain forked: {fork}")
    expected = reference_rows(epochs)
    if seen["rows"] != expected:
        missing = len(set(expected) - set(seen["rows"]))
        extra = len(set(seen["rows"]) - set(expected))
        r.fail(f"committed output differs from a serial run: {missing} rows missing, {extra} extra")
    return seen


def check_loser(r: Round, code: int, err: str, *needles: str) -> None:
    r.exits.append(code)
    if code == 0:
        return
    line = err.strip()
    r.losers.append(line)
    if code != 1 or "\n" in line or not any(n in line for n in needles):
        r.fail(f"a loser exited {code} without the one-line error: {line[:300]!r}")


# -- the three scenarios ------------------------------------------------------------------------
def two_runs(index: int, tmp: Path) -> Round:
    r = Round("two_runs", index)
    uri = (tmp / "store").as_uri()
    first = run("run", "--job", "clickstream", "--store", uri, "--epochs", "2", *STEP)
    if first.returncode != 0:
        r.fail(f"the first run failed: {first.stderr.strip()}")
        return r
    procs = [start("run", "--job", "clickstream", "--store", uri, "--epochs", "4", *STEP) for _ in range(2)]
    results = [finish(p) for p in procs]
    for code, _, err in results:
        check_loser(r, code, err, "is busy", "holds its lease", "BASE_SUPERSEDED")
    if not any(code == 0 for code, _, _ in results):
        r.fail("neither concurrent run succeeded")
    check_output(r, uri, completed_epochs(first.stdout, *(out for _, out, _ in results)))
    return r


def restore_during_run(index: int, tmp: Path) -> Round:
    """Even rounds: the restore must be refused while the run holds the lease. The run is long
    (12 epochs) so the restore starts while it runs; a round where the run nevertheless ended
    before the restore did decides nothing, so it is repeated with a run twice as long (up to
    three tries). Odd rounds wait for the lease (``--wait``): the restore runs after the run."""
    wait = bool(index % 2)
    epochs = 8 if wait else 12
    for attempt in range(3):
        r, inconclusive = _restore_during_run(index, tmp / f"try{attempt}", epochs, wait)
        if not inconclusive:
            return r
        epochs *= 2
    r.fail("the run ended before the restore could race it, three times: the race was not tested")
    return r


def _restore_during_run(index: int, tmp: Path, epochs: int, wait: bool) -> tuple[Round, bool]:
    r = Round("restore_during_run", index)
    uri = (tmp / "store").as_uri()
    marker = tmp / "store" / "clickstream" / "checkpoints"
    proc = start("run", "--job", "clickstream", "--store", uri, "--epochs", str(epochs), *STEP)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(marker.glob("chk-*/_metadata.json")):
        time.sleep(0.05)
    flags = ["--wait"] if wait else []
    restored = run("restore", "--job", "clickstream", "--store", uri, "--from", "latest", *STEP[2:], *flags)
    run_was_over = proc.poll() is not None
    check_loser(r, restored.returncode, restored.stderr, "is busy", "holds its lease")
    if wait and restored.returncode != 0:
        r.fail(f"the waiting restore failed: {restored.stderr.strip()[:300]}")
    code, out, err = finish(proc)
    if code != 0:
        r.fail(f"the run exited {code}: {err.strip()[:300]}")
    after = run("run", "--job", "clickstream", "--store", uri, "--epochs", "2", *STEP)
    if after.returncode != 0:
        r.fail(f"the run after the restore failed: {after.stderr.strip()[:300]}")
    check_output(r, uri, completed_epochs(out, after.stdout))
    # A refused round whose restore succeeded only after the run had ended, and that lost and
    # doubled nothing, did not race: inconclusive, not a failure.
    inconclusive = not wait and restored.returncode == 0 and run_was_over and r.ok
    return r, inconclusive


def damaged_metadata(index: int, tmp: Path) -> Round:
    from state_store.core.codec import canonical_json, sha256_hex

    r = Round("damaged_metadata", index)
    uri = (tmp / "store").as_uri()
    first = run("run", "--job", "clickstream", "--store", uri, "--epochs", "2", *STEP)
    if first.returncode != 0:
        r.fail(f"the first run failed: {first.stderr.strip()}")
        return r
    before = observe(uri)
    path = tmp / "store" / "clickstream" / "checkpoints" / f"chk-{2:010d}" / "_metadata.json"
    data = path.read_bytes()
    how = ("truncated", "edited_stale_checksum", "edited_recomputed_checksum")[index % 3]
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "edited_stale_checksum":
        path.write_bytes(data.replace(b'"trigger_ms":', b'"trigger_ms":1', 1))
    else:
        doc = json.loads(data)
        doc["body"]["checkpoint_id"] = 1
        doc["sha256"] = sha256_hex(canonical_json(doc["body"]))
        path.write_bytes(json.dumps(doc).encode())
    key = "clickstream/checkpoints/chk-0000000002/_metadata.json"
    again = run("run", "--job", "clickstream", "--store", uri, "--epochs", "1", *STEP)
    check_loser(r, again.returncode, again.stderr, key)
    if again.returncode == 0:
        r.fail(f"a run on a damaged latest _metadata.json ({how}) exited 0")
    dry = run("restore", "--job", "clickstream", "--store", uri, "--from", "latest", "--dry-run")
    check_loser(r, dry.returncode, dry.stderr, key)
    if dry.returncode == 0:
        r.fail(f"restore --dry-run planned past a damaged latest _metadata.json ({how})")
    after = observe(uri)
    if after["rows"] != before["rows"]:
        r.fail("the committed output changed after the refusal")
    r.completed, r.duplicates = completed_epochs(first.stdout), after["duplicates"]
    return r


SCENARIOS = {
    "two_runs": two_runs,
    "restore_during_run": restore_during_run,
    "damaged_metadata": damaged_metadata,
}


def run_rounds(rounds: int, scenarios: list[str]) -> list[Round]:
    results = []
    for name in scenarios:
        for i in range(rounds):
            started = time.monotonic()
            with tempfile.TemporaryDirectory() as tmp:
                r = SCENARIOS[name](i, Path(tmp))
            r.seconds = round(time.monotonic() - started, 2)
            results.append(r)
            print(f"{name} round {i}: {'ok' if r.ok else 'FAILED: ' + '; '.join(r.problems)}", flush=True)
    return results


def markdown(results: list[Round], rounds: int) -> str:
    lines = [
        "# Operators racing on one job (issue 18's reproductions, repeated)",
        "",
        f"`python -m bench.concurrency --rounds {rounds}`; real CLI processes, local store, "
        "`--executor local --time-step-ms 10000`. See `bench/concurrency.py` for what each round "
        "does and checks.",
        "",
        "| scenario | rounds | failed | duplicate rows | forks | losers (exit 1, one line) "
        "| winners (exit 0) | s/round |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in SCENARIOS:
        rs = [r for r in results if r.scenario == name]
        if not rs:
            continue
        failed = sum(not r.ok for r in rs)
        forks = sum(1 for r in rs for p in r.problems if "forked" in p)
        losers = sum(len(r.losers) for r in rs)
        winners = sum(1 for r in rs for code in r.exits if code == 0)
        dup = sum(r.duplicates for r in rs)
        secs = sum(r.seconds for r in rs) / len(rs)
        lines.append(
            f"| {name} | {len(rs)} | {failed} | {dup} | {forks} | {losers} | {winners} | {secs:.1f} |"
        )
    lines += ["", "Loser messages seen (one example per scenario):", ""]
    for name in SCENARIOS:
        example = next((line for r in results if r.scenario == name for line in r.losers), None)
        if example:
            lines.append(f"- {name}: `{example}`")
    problems = [f"- {r.scenario} round {r.index}: {'; '.join(r.problems)}" for r in results if not r.ok]
    lines += ["", "Failures:", "", *(problems or ["- none"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    results = run_rounds(args.rounds, args.scenario or list(SCENARIOS))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "concurrency.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    (args.out / "concurrency.md").write_text(markdown(results, args.rounds))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
