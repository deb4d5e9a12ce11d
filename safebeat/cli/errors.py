"""Every `safebeat` error is one line and a non-zero exit, unless --traceback asks for more."""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable
from typing import Any

import click

from safebeat.cli.app import AppNotFound
from safebeat.display import one_line
from safebeat.errors import SafebeatError, StoreError

#: Said after an error that has more to it than its line (a driver's error behind it).
MORE = "(run again with --traceback for the full error)"


class UsageProblem(click.ClickException):
    """A command given wrongly (a bad -A, a missing -A): one line and exit status 2."""

    exit_code = 2


def _debug(ctx: click.Context) -> bool:
    """Whether --traceback (of `safebeat` or `celery safebeat`) or SAFEBEAT_DEBUG asks for it."""
    asked = ctx
    while asked.parent is not None and "traceback" not in asked.params:
        asked = asked.parent
    return bool(asked.params.get("traceback")) or os.environ.get("SAFEBEAT_DEBUG", "") not in (
        "",
        "0",
    )


def _has_more(exc: BaseException) -> bool:
    """Whether `exc` stands for another error (a driver's), which --traceback shows."""
    return exc.__cause__ is not None or (
        exc.__context__ is not None and not exc.__suppress_context__
    )


def invoke_with_one_line_errors(ctx: click.Context, invoke: Callable[[], Any]) -> Any:
    """Run `invoke` (a group's own invoke) so every error is one line, unless --traceback."""
    try:
        return invoke()
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except BrokenPipeError as exc:
        if _reader_gone():
            raise  # `safebeat status | head`: click's main exits quietly
        if _debug(ctx):
            raise
        raise click.ClickException(_unexpected(exc)) from exc  # a socket's, not stdout's
    except AppNotFound as exc:
        if _debug(ctx):
            raise
        problem = UsageProblem if exc.usage else click.ClickException
        raise problem(one_line(str(exc))) from exc
    except SafebeatError as exc:
        if _debug(ctx):
            raise
        said = one_line(str(exc))
        if isinstance(exc, StoreError) and exc.url_origin:
            said = f"{said}; the store URL is from {exc.url_origin}"
        raise click.ClickException(f"{said} {MORE}" if _has_more(exc) else said) from exc
    except Exception as exc:
        if _debug(ctx):
            raise
        raise click.ClickException(_unexpected(exc)) from exc


def _unexpected(exc: BaseException) -> str:
    return (
        f"unexpected {type(exc).__name__}: {one_line(str(exc))} (run again with "
        "--traceback, or SAFEBEAT_DEBUG=1, to see where it happened)"
    )


def _reader_gone() -> bool:
    """Whether standard output's reader has left: a pipe or socket whose other end is
    closed polls as an error. Where that cannot be asked, a broken pipe is taken as it."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False  # not a file (captured): the broken pipe was another one's
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
