"""`safebeat exec`: run a command once per window, however many hosts or pods start it.

One start, in order:

1. the window (`safebeat.runners.cron.find_window`): the scheduled time the starter passed, else
   the latest slot at or before this host's clock, within the grace;
2. the command is looked up first: one that cannot be found or run claims nothing, so a
   host that has it can still win the window;
3. the window is claimed in the store (`Store.write_windows`, reason `exec`). If the store
   cannot be reached, the command is not run (fail closed), unless `fail_open` is set;
4. if another host already claimed it, nothing runs and the exit status is 0;
5. the command runs with `SAFEBEAT_ENTRY` and `SAFEBEAT_WINDOW` in its environment; the
   signals a supervisor sends (SIGTERM from Kubernetes, SIGINT, ...) are passed on to it;
   its start, end, outcome and worker (`host:pid`) are recorded on the dispatch row;
6. the exit status is the command's (128 + N when a signal N ended it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import FrameType

from safebeat.config import Config
from safebeat.current import ENTRY_VARIABLE, WINDOW_VARIABLE
from safebeat.errors import SafebeatError
from safebeat.identity import format_window
from safebeat.records import Claim, Outcome, RunEnd
from safebeat.runners import cron
from safebeat.runners import direct as local_runs
from safebeat.stores.protocols import Store
from safebeat.windows import CrontabRule

#: Exit statuses of safebeat exec itself, as `env` and `timeout` use them.
EXIT_NOT_RUN = 125  # no window, or the store could not claim it: the command was not run
EXIT_CANNOT_RUN = 126  # the command exists but cannot be started
EXIT_NOT_FOUND = 127  # no such command
#: Signals passed on to the command.
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
#: Signals a terminal sends to its whole foreground process group, the command included.
_TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT)
REASON = "exec"


class ExecError(SafebeatError):
    """safebeat exec did not run the command; `exit_code` says why (125, 126 or 127)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Request:
    """What one `safebeat exec` was asked to do."""

    entry: str
    rule: CrontabRule
    schedule: str  # the text `safebeat status` shows
    argv: Sequence[str]
    grace: timedelta
    scheduled_time: str | None = None
    job_name: str | None = None
    fail_open: bool = False


Say = Callable[[str], None]


def run_once(
    request: Request,
    config: Config,
    store: Store,
    *,
    now: datetime,
    say: Say,
) -> int:
    """Run `request` once for its window; return the exit status for the process.

    Raises ExecError (with its exit status) when the command is not run: no window fits,
    the command cannot be found, or the store cannot claim (without `fail_open`).
    """
    try:
        found = cron.find_window(
            request.rule,
            now=now,
            grace=request.grace,
            scheduled_time=request.scheduled_time,
            job_name=request.job_name,
        )
    except SafebeatError as exc:
        raise ExecError(f"{exc}; the command was not run", EXIT_NOT_RUN) from exc
    where = f"entry {request.entry!r} window {format_window(found.window)}"
    executable = locate(request.argv[0])
    namespace = config.namespace
    try:
        if config.auto_migrate:
            store.migrate()
        registration = local_runs.register(
            store, namespace, request.entry, request.schedule, list(request.argv)
        )
        won = local_runs.claim(
            store,
            namespace,
            request.entry,
            found.window,
            reason=REASON,
            task_name=os.path.basename(executable),
        )
    except SafebeatError as exc:
        if not request.fail_open:
            raise ExecError(
                f"{where}: cannot claim the window ({exc}); the command was not run "
                "(fail closed; --fail-open runs it anyway)",
                EXIT_NOT_RUN,
            ) from exc
        say(
            f"{where}: cannot claim the window ({exc}); running the command anyway, "
            "untracked (--fail-open: another host may run it too)"
        )
        return run_command(request.argv, _environment(request.entry, found.window), record=None)
    if request.entry in registration.changed:
        say(
            f"entry {request.entry!r} had another definition in namespace {namespace!r} "
            "(another host runs a different schedule or command under this name?)"
        )
    if won is None:
        say(f"{where}: {_held(store, namespace, request.entry, found.window)}; not running it here")
        return 0
    say(f"{where} ({found.source}): claimed; running {executable}")
    recorder = _Recorder(store, namespace, won, say, where)
    return run_command(request.argv, _environment(request.entry, found.window), record=recorder)


def locate(program: str) -> str:
    """Return the path `program` runs from; ExecError (127 or 126) if it cannot run."""
    path = program if os.sep in program else shutil.which(program)
    if path is None or not os.path.exists(path):
        raise ExecError(f"command not found: {program!r}; nothing was claimed", EXIT_NOT_FOUND)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise ExecError(
            f"command {program!r} ({path}) is not executable; nothing was claimed",
            EXIT_CANNOT_RUN,
        )
    return path


def _environment(entry: str, window: datetime) -> dict[str, str]:
    return {**os.environ, ENTRY_VARIABLE: entry, WINDOW_VARIABLE: format_window(window)}


def _held(store: Store, namespace: str, entry: str, window: datetime) -> str:
    """Say who holds the window, as far as the store can tell."""
    try:
        record = local_runs.holder(store, namespace, entry, window)
    except SafebeatError:
        record = None
    if record is None:
        return "already claimed by another process"
    outcome = "running" if record.outcome is None else record.outcome.value
    if record.started_at is None:
        outcome = record.status.value
    return f"already claimed by {record.replica} ({outcome})"


class _Recorder:
    """Records the run of a claimed window; a store error only costs the record."""

    def __init__(self, store: Store, namespace: str, won: Claim, say: Say, where: str) -> None:
        self.store = store
        self.namespace = namespace
        self.won = won
        self.say = say
        self.where = where
        self.worker = ""

    def not_started(self, error: str) -> None:
        self._try("failure to start", local_runs.not_started, error)

    def started(self, pid: int) -> None:
        self.worker = f"{socket.gethostname()}:{pid}"
        self._try("start", local_runs.started, worker=self.worker)

    def finished(self, end: RunEnd) -> None:
        self._try("end", local_runs.finished, worker=self.worker, end=end)

    def _try(self, what: str, step: Callable[..., object], *args: object, **kwargs: object) -> None:
        try:
            step(self.store, self.namespace, self.won, *args, **kwargs)
        except SafebeatError as exc:
            self.say(f"{self.where}: could not record its {what} ({exc}); the claim stands")


def run_command(argv: Sequence[str], env: dict[str, str], *, record: _Recorder | None) -> int:
    """Run the command to its end, passing signals on; return its exit status."""
    with _forwarding() as forward:
        began = time.monotonic()
        try:
            child = subprocess.Popen(list(argv), env=env)  # noqa: S603 - the user's command
        except OSError as exc:
            if record is not None:
                record.not_started(f"cannot start {argv[0]!r}: {exc}")
            code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_CANNOT_RUN
            raise ExecError(f"cannot start {argv[0]!r}: {exc}", code) from exc
        forward(child)
        if record is not None:
            record.started(child.pid)
        returncode = child.wait()
    runtime = timedelta(seconds=time.monotonic() - began)
    code = 128 - returncode if returncode < 0 else returncode
    if record is not None:
        how = f"was ended by signal {-returncode}" if returncode < 0 else f"exited with {code}"
        record.finished(
            RunEnd(
                Outcome.SUCCESS if code == 0 else Outcome.FAILURE,
                runtime,
                None if code == 0 else f"the command {how}",
            )
        )
        record.say(f"{record.where}: the command {how} after {runtime.total_seconds():.1f}s")
    return code


@contextmanager
def _forwarding() -> Iterator[Callable[[subprocess.Popen[bytes]], None]]:
    """Pass the signals in FORWARDED on to the child while the block runs.

    A signal that comes before the child exists is held and sent once it does. SIGINT
    and SIGQUIT from the terminal this process runs in the foreground of already reached
    the child (a terminal signals the whole process group), so they are not sent twice.
    """
    child: list[subprocess.Popen[bytes]] = []
    held: list[int] = []

    def handle(signum: int, _frame: FrameType | None) -> None:
        if signum in _TERMINAL_SIGNALS and _from_terminal():
            return
        if child:
            with suppress(ProcessLookupError):
                child[0].send_signal(signum)
        else:
            held.append(signum)

    def attach(process: subprocess.Popen[bytes]) -> None:
        child.append(process)
        for signum in held:
            with suppress(ProcessLookupError):
                process.send_signal(signum)

    previous = {signum: signal.signal(signum, handle) for signum in FORWARDED}
    try:
        yield attach
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _from_terminal() -> bool:
    """Whether this process group is in the foreground of the terminal on stdin."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError):
        return False
