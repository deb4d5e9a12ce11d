"""Read a documentation page's code blocks, so tests can run the page as a reader would.

A fenced block is found by what the page itself says about it:

- a Python block whose first line is a comment naming a path (`# proj/celery.py`) is that
  file, whole;
- any other block that a test needs carries a label in an HTML comment on the line just
  before its fence (`<!-- block: beat -->`), which readers of the rendered page never see.

Output blocks are compared with real output line by line after `normalise`, which blanks
only what differs from run to run (times, ids, hosts, URLs); every other character of a
line the page shows must appear in the real output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_LABEL = re.compile(r"^\s*<!--\s*block:\s*(?P<name>[\w-]+)\s*-->\s*$")
_PATH_COMMENT = re.compile(r"^# (?P<path>[\w./-]+\.py)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language, its text (dedented) and where it is."""

    language: str
    text: str
    label: str | None
    line: int

    @property
    def path(self) -> str | None:
        """The file this block is, when its first line names one (`# proj/celery.py`)."""
        first = self.text.split("\n", 1)[0]
        match = _PATH_COMMENT.match(first)
        return match["path"] if match and self.language == "python" else None

    def commands(self) -> list[str]:
        """The shell commands of the block: its lines, without blank and comment lines."""
        lines = (line.strip() for line in self.text.splitlines())
        return [line for line in lines if line and not line.startswith("#")]


def blocks(markdown: str) -> list[Block]:
    """Every fenced block of `markdown`, in order (also those indented in list items)."""
    lines = markdown.splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        label = None
        if index > 0:
            marker = _LABEL.match(lines[index - 1])
            label = marker["name"] if marker else None
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not _closes(lines[end], indent, fence):
            body.append(lines[end][len(indent) :] if lines[end].startswith(indent) else lines[end])
            end += 1
        if end == len(lines):
            raise ValueError(f"line {index + 1}: a code block is never closed")
        language = opening["info"].strip().split(" ")[0]
        found.append(Block(language, "\n".join(body) + "\n", label, index + 1))
        index = end + 1
    return found


def _closes(line: str, indent: str, fence: str) -> bool:
    stripped = line.strip()
    return line.startswith(indent) and set(stripped) == {fence[0]} and len(stripped) >= len(fence)


class Page:
    """A Markdown page of `docs/`, with its labelled blocks and the files it shows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.blocks = blocks(path.read_text(encoding="utf-8"))

    def block(self, label: str) -> Block:
        """The block labelled `label`; the page must have exactly one."""
        matching = [b for b in self.blocks if b.label == label]
        assert len(matching) == 1, (
            f"{self.path.name}: expected one block marked <!-- block: {label} -->, "
            f"found {len(matching)}"
        )
        return matching[0]

    def files(self) -> dict[str, str]:
        """Every file the page shows whole, by the path its first line names."""
        files: dict[str, str] = {}
        for block in self.blocks:
            if block.path is None:
                continue
            assert block.path not in files, (
                f"{self.path.name} line {block.line}: a second block is {block.path}; "
                "a page shows each file whole, once"
            )
            files[block.path] = block.text
        return files


_VOLATILE = [
    # Celery's log prefix: the time, and the pool process's number.
    (re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}: "), "[<time>: "),
    (re.compile(r"ForkPoolWorker-\d+"), "ForkPoolWorker-<n>"),
    # URLs: the tests run the page against their own services.
    (re.compile(r"\b[a-z][a-z0-9+]*://\S+?(?=[\s,)]|$)"), "<url>"),
    # Instants: windows and timestamps, ISO 8601 or as Python prints a datetime.
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"), "<instant>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d\b"), "<date>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    # A replica id: host:pid:token.
    (re.compile(r"[\w.-]+:\d+:[0-9a-f]{6}\b"), "<replica>"),
    (re.compile(r"\b\d+(\.\d+)?s\b"), "<seconds>"),
]


def normalise(line: str) -> str:
    """`line` with times, ids, hosts and URLs blanked, and trailing space removed."""
    for pattern, replacement in _VOLATILE:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def missing_lines(shown: str, output: str) -> list[str]:
    """The lines of `shown` (a page's output block) that appear nowhere in `output`.

    Lines are compared after `normalise`; a line that is only `...` stands for lines the
    page leaves out.
    """
    real = {normalise(line) for line in output.splitlines()}
    wanted = [line for line in shown.splitlines() if line.strip() not in ("", "...")]
    return [line for line in wanted if normalise(line) not in real]
