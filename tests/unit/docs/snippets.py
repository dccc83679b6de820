"""Extract the runnable snippets of README.md and docs/*.md (the convention, enforced by the tests).

Fenced blocks, by info string:

* ``console`` -- a line starting with ``$ `` is a command (a trailing ``\\`` continues it on the next
  line); other lines are sample output. ``# exit N`` at the end of a command says it must exit with
  N (default 0); for N != 0 the first output line shown must be the first line the command prints
  on stderr (on stdout if stderr is empty); a shown line ending in ``...`` must be a prefix of it
  (bad-input examples show the real one-line error).
* ``bash`` / ``sh`` / ``shell`` -- every line that is not blank or a comment is a command.
* ``python`` -- executed; all python blocks of one file share one interpreter, in order.
* anything else (``text``, ``yaml``, ``json``, ...) is not executed, so it must not contain commands:
  no line starting with ``$ ``, ``epochal ``, ``make `` or ``airflow ``.

Inline code: a span that starts with ``epochal `` and has an option (``--``) must be the beginning
of a command run by some block; a span ``make <target>`` must name a Makefile target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SHELL_LANGS = {"bash", "sh", "shell"}
_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)[^\n]*$")
_EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")
COMMAND_LIKE = re.compile(r"^\s*(\$ |epochal |make |airflow |docker )")


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str
    expected_exit: int = 0
    expected_error: str | None = None

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # line of the first content line
    lang: str
    lines: tuple[str, ...]


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[:3]):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"{rel(path)}:{i + 1}: fenced block is never closed")
        found.append(Block(rel(path), i + 2, lang, tuple(body)))
        i = j + 1
    return found


def commands(block: Block) -> list[Command]:
    out: list[Command] = []
    if block.lang == "console":
        k = 0
        while k < len(block.lines):
            line = block.lines[k]
            if not line.startswith("$ "):
                k += 1
                continue
            start, text = k, line[2:]
            while text.endswith("\\") and k + 1 < len(block.lines):
                k += 1
                text = text[:-1].rstrip() + " " + block.lines[k].strip()
            k += 1
            exit_code, error = 0, None
            m = _EXIT.search(text)
            if m:
                exit_code, text = int(m.group(1)), text[: m.start()]
                if exit_code and k < len(block.lines) and not block.lines[k].startswith("$ "):
                    error = block.lines[k].strip()
            out.append(Command(block.doc, block.line + start, text.strip(), exit_code, error))
    elif block.lang in SHELL_LANGS:
        for k, line in enumerate(block.lines):
            text = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if text:
                out.append(Command(block.doc, block.line + k, text))
    return out


def inline_code(path: Path) -> list[tuple[int, str]]:
    """Inline code spans outside fenced blocks: (line number, text)."""
    spans: list[tuple[int, str]] = []
    inside = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if _FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            spans.extend((n, s) for s in re.findall(r"`([^`\n]+)`", line))
    return spans


def makefile_targets() -> dict[str, str]:
    """target -> its recipe (the tab-indented lines after it)."""
    targets: dict[str, str] = {}
    current = None
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^([a-zA-Z_-]+):", line)
        if m:
            current = m.group(1)
            targets[current] = ""
        elif line.startswith("\t") and current:
            targets[current] += line.strip() + "\n"
        elif line.strip() and not line.startswith("\t"):
            current = None
    return targets
