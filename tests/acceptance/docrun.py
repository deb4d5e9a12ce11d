"""Run a documentation page's commands as a reader would: in a fresh virtualenv, in a folder.

The tests of executable pages build a `Reader`: a project folder, a virtualenv made
with the page's own install command, and the environment of a terminal in which that
virtualenv is active. Every command of the page runs in a shell, as written, except for
the `substitutions` a test states: the localhost URLs a page names for its broker and
store become the test's own services.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import time
import venv
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.docpages import Block, Page, missing_lines

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: Where a page says to install from a checkout, it names the checkout this way.
CHECKOUT = "path/to/safebeat"

#: What a reader's shell must not inherit from the test run: settings that would win over
#: the page's own, and the path that would import safebeat from this checkout.
_INHERITED = re.compile(r"^(SAFEBEAT_|CELERY_|DJANGO_SETTINGS_MODULE$|PYTHONPATH$|VIRTUAL_ENV$)")


def only_command(block: Block) -> str:
    """The block's single command; a block the tests run as one command must hold one."""
    commands = block.commands()
    assert len(commands) == 1, f"the block at line {block.line} should be one command: {commands}"
    return commands[0]


def make_virtualenv(
    folder: Path, page: Page, label: str, *, requirements: tuple[str, ...] = ()
) -> Path:
    """A new virtualenv in `folder`, set up by the page's block `label` (`pip install ...`).

    `requirements` are installed first: what the reader's project had before the page.
    The page's command runs as written, with the checkout's folder for `path/to/safebeat`.
    """
    block = page.block(label)
    assert CHECKOUT in block.text, f"{page.path.name}: block {label!r} installs no checkout"
    venv.EnvBuilder(with_pip=True).create(folder)
    reader = Reader(folder, folder.parent, {CHECKOUT: str(ROOT)})
    if requirements:
        reader.run(shlex.join(["pip", "install", *requirements]), timeout=600)
    for command in block.commands():
        reader.run(command, timeout=600)
    return folder


@dataclass
class Reader:
    """A terminal with the page's virtualenv active, in the project folder `cwd`."""

    venv: Path
    cwd: Path
    substitutions: Mapping[str, str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def environment(self) -> dict[str, str]:
        inherited = {k: v for k, v in os.environ.items() if not _INHERITED.match(k)}
        path = f"{self.venv / 'bin'}{os.pathsep}{inherited.get('PATH', '')}"
        return {**inherited, "PATH": path, "VIRTUAL_ENV": str(self.venv)}

    def substitute(self, text: str) -> str:
        for written, used in self.substitutions.items():
            text = text.replace(written, used)
        return text

    def write_files(self, files: Mapping[str, str]) -> None:
        """Write the page's files into the project folder, with the substitutions."""
        for relative, content in files.items():
            target = self.cwd / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.substitute(content), encoding="utf-8")

    def run(self, command: str, *, timeout: float = 120) -> str:
        """Run `command` to its end and return its output; it must exit 0."""
        result = subprocess.run(
            ["bash", "-c", self.substitute(command)],
            cwd=self.cwd,
            env=self.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
        output = result.stdout.decode(errors="replace")
        assert result.returncode == 0, f"`{command}` exited {result.returncode}:\n{output}"
        return output

    def start(self, command: str, log: Path) -> subprocess.Popen[bytes]:
        """Start `command` in the background (a terminal of its own); its output goes to `log`."""
        with log.open("wb") as sink:
            process = subprocess.Popen(
                ["bash", "-c", "exec " + self.substitute(command)],
                cwd=self.cwd,
                env=self.environment(),
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)
        return process

    def stop(self, *processes: subprocess.Popen[bytes]) -> None:
        """Stop `processes` (default: all started) as Ctrl+C in their terminals would, and wait."""
        for process in processes or self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes or self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def wait_for(
    check: Callable[[], bool],
    what: str,
    *,
    timeout: float,
    alive: Iterable[subprocess.Popen[bytes]],
    logs: Callable[[], str],
) -> None:
    """Wait until `check()` holds; fail at once if one of the `alive` processes ended."""
    deadline = time.monotonic() + timeout
    watched = list(alive)
    while not check():
        ended = [p.args for p in watched if p.poll() is not None]
        assert not ended, f"{ended} ended while waiting for {what}:\n{logs()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{logs()}"
        time.sleep(0.25)


def assert_shows(page: Page, label: str, output: str, logs: str) -> None:
    """Every line of the page's output block `label` appears in `output` (see `normalise`)."""
    missing = missing_lines(page.block(label).text, output)
    assert missing == [], (
        f"{page.path.name}: lines of <!-- block: {label} --> that the real output lacks:\n"
        + "\n".join(missing)
        + f"\n\nthe real output:\n{logs}"
    )


def tail(paths: list[Path], lines: int = 40) -> str:
    parts = []
    for path in paths:
        text = path.read_text(errors="replace") if path.exists() else ""
        parts.append(f"--- {path.name}\n" + "\n".join(text.splitlines()[-lines:]))
    return "\n".join(parts)


def add_settings(settings: Path, snippet: str) -> None:
    """Add a page's settings snippet to the module `settings`, as a reader edits theirs.

    In a list, `...` stands for what the setting already holds: the items after it are
    added to the existing list (those it lacks). Every other statement is added as it is.
    """
    added = []
    for node in ast.parse(snippet).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            items = node.value.elts
            if any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in items):
                (target,) = node.targets
                assert isinstance(target, ast.Name), ast.unparse(node)
                new = [
                    ast.literal_eval(e)
                    for e in items
                    if not isinstance(e, ast.Constant) or e.value is not Ellipsis
                ]
                name = target.id
                added.append(f"{name} = [*{name}, *(i for i in {new!r} if i not in {name})]")
                continue
        added.append(ast.unparse(node))
    with settings.open("a", encoding="utf-8") as module:
        module.write("\n" + "\n".join(added) + "\n")
