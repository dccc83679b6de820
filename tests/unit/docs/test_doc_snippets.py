"""Every command and code example in README.md and docs/*.md runs, in a test (convention: snippets.py).

How each kind of command is proven:

* ``epochal ...`` and other shell commands run for real, one bash session per document (so an
  ``export STORE=...`` carries over), in a temp dir, with the project's venv on PATH; every
  ``epochal run``/``epochal demo`` must say ``--executor local`` (no JVM: the whole test stays well
  under two minutes). Exit codes are checked; bad-input examples must print the shown error line.
* ``python`` blocks run in one interpreter per document, in order, in a temp dir.
* ``make demo`` and ``make test`` cannot run inside ``make test`` (``make test`` would recurse; the
  demo takes minutes and is what the demo test exercises). Instead this test checks that they are
  exactly what CI and the demo test run: both are Makefile targets; ``test`` runs lint then pytest
  and ``.ci/run`` calls ``make test``; ``demo`` runs ``python deploy/demo.py``, whose
  wiring test_demo_entry_point.py checks and whose DAG runs (one killed, then recovered) run for real
  in tests/integration/airflow/test_epoch_dag.py. ``make help`` runs for real.
* ``docker compose ...`` cannot run (no Docker engine): the compose file is checked by
  tests/unit/deploy/test_compose.py, and here each command must name existing services.
* ``airflow dags trigger <dag> --conf JSON`` needs a running Airflow: here the DAG must be one the DAG
  factory builds and every conf key one of that DAG's params.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.unit.docs.snippets import (
    COMMAND_LIKE,
    ROOT,
    SHELL_LANGS,
    Block,
    Command,
    blocks,
    commands,
    doc_files,
    inline_code,
    makefile_targets,
    rel,
)

DOCS = doc_files()
DOC_IDS = [rel(p) for p in DOCS]
TIMEOUT_S = 600.0  # per document; the measured total is about 1 min of CPU (see the report)


def _all_commands() -> list[Command]:
    return [c for p in DOCS for b in blocks(p) for c in commands(b)]


def _is_checked_not_run(cmd: Command) -> bool:
    words = shlex.split(cmd.text)
    return (
        (words[:1] == ["make"] and words[1:] != ["help"])
        or words[:2] == ["docker", "compose"]
        or words[:3] == ["airflow", "dags", "trigger"]
        or cmd.text == "cp .env.example .env"
    )


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EPOCHAL_", "AIRFLOW_", "AWS_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins")])
    env["PYSPARK_PYTHON"] = sys.executable
    env["HOME"] = str(tmp)
    return env


# -- the convention itself ---------------------------------------------------------------------------


def test_every_document_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for path in DOCS[1:]:
        assert f"({rel(path)})" in readme, f"README.md does not link {rel(path)}"


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_commands_only_appear_in_runnable_blocks(path: Path) -> None:
    for block in blocks(path):
        if block.lang in ("console", "python", *SHELL_LANGS):
            continue
        for k, line in enumerate(block.lines):
            assert not COMMAND_LIKE.match(line), (
                f"{block.doc}:{block.line + k}: a command in a ```{block.lang or 'plain'} block is never "
                "tested: use ```console with '$ ' lines"
            )


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_inline_commands_are_run_somewhere_or_name_a_make_target(path: Path) -> None:
    run = [c.text for c in _all_commands()]
    targets = makefile_targets()
    for line, span in inline_code(path):
        if span.startswith("epochal ") and " --" in span:
            assert any(c.startswith(span) for c in run), (
                f"{rel(path)}:{line}: inline command `{span}` is not run by any snippet: put it in a "
                "```console block or shorten it to the subcommand name"
            )
        if re.match(r"^make [a-z-]+$", span):
            assert span.split()[1] in targets, f"{rel(path)}:{line}: `{span}` is not a Makefile target"


def test_doc_commands_never_start_a_jvm() -> None:
    for cmd in _all_commands():
        words = cmd.text.split()
        if words[:2] in (["epochal", "run"], ["epochal", "demo"]):
            assert "--executor local" in cmd.text, (
                f"{cmd.where}: add --executor local (docs run without Spark)"
            )


def test_the_extractor_reads_console_blocks_exit_codes_and_errors(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "```console\n$ epochal run --job a \\\n    --store s   # exit 2\nepochal: bad job\n"
        "$ echo hi\nhi\n```\n"
        "```bash\nmake demo   # runs the demo\n            # more comment\n```\n"
    )
    found = [c for b in blocks(doc) for c in commands(b)]
    assert [(c.text, c.expected_exit, c.expected_error) for c in found] == [
        ("epochal run --job a --store s", 2, "epochal: bad job"),
        ("echo hi", 0, None),
        ("make demo", 0, None),
    ]


# -- make demo / make test: checked against the Makefile, CI and the demo test -------------------------


def test_make_demo_and_make_test_are_the_targets_ci_and_the_demo_test_run() -> None:
    documented = {c.text for c in _all_commands() if c.text.startswith("make ")}
    assert {"make demo", "make test"} <= documented
    targets = makefile_targets()
    for cmd in documented:
        assert cmd.split()[1] in targets, f"`{cmd}` is documented but the Makefile has no such target"
    assert "pytest" in targets["test"]
    suites = sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.rglob("test_*.py")))
    missing = [s for s in suites if f"tests/{s}" not in targets["test"]]
    assert not missing, f"make test runs pytest per test directory and misses {missing}: add them"
    assert re.search(r"^test:\s*lint\b", (ROOT / "Makefile").read_text(), re.M), "make test must lint first"
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, re.M), ".ci/run must call make test"
    assert "python deploy/demo.py" in targets["demo"]
    # the demo entry point is checked (not run: minutes) by test_demo_entry_point.py; its DAG runs,
    # including a killed one, run for real in tests/integration/airflow/test_epoch_dag.py
    here = Path(__file__).parent
    assert "python deploy/demo.py" in (here / "test_demo_entry_point.py").read_text()
    assert "epochal_clickstream" in (ROOT / "tests/integration/airflow/test_epoch_dag.py").read_text()


def test_docker_compose_commands_name_real_services() -> None:
    services = set(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"])
    assert (ROOT / "tests" / "unit" / "deploy" / "test_compose.py").is_file()
    for cmd in _all_commands():
        words = shlex.split(cmd.text)
        if words[:2] != ["docker", "compose"]:
            continue
        assert words[2] in {"up", "down", "ps", "logs", "build", "config", "exec", "run", "restart"}, (
            cmd.where
        )
        named = [w for w in words[3:] if not w.startswith("-")]
        if words[2] in ("exec", "run"):
            named = named[:1]
        assert set(named) <= services, f"{cmd.where}: unknown services {set(named) - services}"


def test_airflow_trigger_commands_name_real_dags_and_params(tmp_path: Path) -> None:
    triggers = [c for c in _all_commands() if "airflow dags trigger " in c.text]
    assert triggers, "the docs show no `airflow dags trigger` example any more: drop this test"
    from epochal_airflow.config import EpochalSettings
    from epochal_airflow.dag_factory import build_all

    dags = build_all(EpochalSettings.from_env({"AIRFLOW_HOME": str(tmp_path), "EPOCHAL_JOBS": "clickstream"}))
    by_id = {dag.dag_id: dag for dag in dags.values()}
    for cmd in triggers:
        words = shlex.split(cmd.text[cmd.text.index("airflow dags trigger ") :])
        dag_id = words[3]
        assert dag_id in by_id, f"{cmd.where}: DAG {dag_id} does not exist (have {sorted(by_id)})"
        if "--conf" in words:
            conf = json.loads(words[words.index("--conf") + 1])
            params = set(by_id[dag_id].params.keys())
            assert set(conf) <= params, f"{cmd.where}: {dag_id} has no params {set(conf) - params}"


# -- running the snippets ----------------------------------------------------------------------------


def _run_shell(path: Path, tmp: Path) -> list[str]:
    cmds = [c for b in blocks(path) for c in commands(b) if not _is_checked_not_run(c)]
    if not cmds:
        return []
    script = ["cd " + shlex.quote(str(tmp))]
    for i, cmd in enumerate(cmds):
        script += [f"echo '@@begin {i}'; echo '@@begin {i}' >&2", cmd.text, f'echo "@@rc {i} $?"']
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)], env=_env(tmp), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    out_parts = re.split(r"^@@begin (\d+)\n", result.stdout, flags=re.M)
    err_parts = re.split(r"^@@begin (\d+)\n", result.stderr, flags=re.M)
    outs = dict(zip(out_parts[1::2], out_parts[2::2]))
    errs = dict(zip(err_parts[1::2], err_parts[2::2]))
    problems = []
    for i, cmd in enumerate(cmds):
        out, err = outs.get(str(i), ""), errs.get(str(i), "")
        m = re.search(rf"^@@rc {i} (\d+)$", out, re.M)
        if not m:
            problems.append(f"{cmd.where}: `{cmd.text}` never finished (the session ended): {err[-500:]}")
            break
        rc = int(m.group(1))
        if rc != cmd.expected_exit:
            problems.append(
                f"{cmd.where}: `{cmd.text}` exited {rc}, expected {cmd.expected_exit}:\n"
                f"{out[-800:]}{err[-1500:]}"
            )
        elif cmd.expected_error is not None:
            printed = err.strip() or re.sub(rf"^@@rc {i} \d+$", "", out, flags=re.M).strip()
            first = printed.splitlines()[0] if printed else ""
            shown = cmd.expected_error
            if not (first == shown or (shown.endswith("...") and first.startswith(shown[:-3]))):
                problems.append(
                    f"{cmd.where}: `{cmd.text}` printed {first!r}, the doc shows {cmd.expected_error!r}"
                )
    return problems


_PY_DRIVER = """
import json, sys, traceback
blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__doc_snippets__"}
for where, code in blocks:
    try:
        exec(compile(code, where, "exec"), ns)
    except BaseException:
        print("@@failed " + where, file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


def _run_python(path: Path, tmp: Path) -> list[str]:
    code = [(f"{b.doc}:{b.line}", "\n".join(b.lines)) for b in blocks(path) if b.lang == "python"]
    if not code:
        return []
    spec = tmp / "blocks.json"
    spec.write_text(json.dumps(code))
    result = subprocess.run(
        [sys.executable, "-c", _PY_DRIVER, str(spec)],
        cwd=tmp, env=_env(tmp), capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    if result.returncode != 0:
        return [f"python example failed:\n{result.stdout[-500:]}{result.stderr[-3000:]}"]
    return []


def _run_document(path: Path, tmp: Path) -> list[str]:
    (tmp / "sh").mkdir()
    (tmp / "sh" / ".venv").symlink_to(sys.prefix)  # the docs say `source .venv/bin/activate`
    (tmp / "py").mkdir()
    return _run_shell(path, tmp / "sh") + _run_python(path, tmp / "py")


@pytest.fixture(scope="module")
def snippet_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Every document's snippets, two documents at a time (each is one sequential session; the
    documents are independent, so this halves the wall time on two cores)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            rel(p): pool.submit(_run_document, p, tmp_path_factory.mktemp(p.stem))
            for p in sorted(DOCS, key=lambda p: -len(p.read_text()))  # the longest first
        }
        return {doc: future.result() for doc, future in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_snippets_run(path: Path, snippet_results: dict[str, list[str]]) -> None:
    problems = snippet_results[rel(path)]
    assert not problems, "\n\n".join(problems)


def test_blocks_are_parsed_from_every_document() -> None:
    kinds = {b.lang for p in DOCS for b in blocks(p)}
    assert {"console", "python"} <= kinds
    assert all(isinstance(b, Block) for b in blocks(ROOT / "README.md"))
