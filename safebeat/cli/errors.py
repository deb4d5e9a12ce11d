"""Every `safebeat` error is one line and a non-zero exit, unless --traceback asks for more."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from safebeat.cli.app import AppNotFound
from safebeat.display import one_line
from safebeat.errors import SafebeatError


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


def invoke_with_one_line_errors(ctx: click.Context, invoke: Callable[[], Any]) -> Any:
    """Run `invoke` (a group's own invoke) so every error is one line, unless --traceback."""
    try:
        return invoke()
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except AppNotFound as exc:
        if _debug(ctx):
            raise
        problem = UsageProblem if exc.usage else click.ClickException
        raise problem(one_line(str(exc))) from exc
    except SafebeatError as exc:
        if _debug(ctx):
            raise
        raise click.ClickException(one_line(str(exc))) from exc
    except Exception as exc:
        if _debug(ctx):
            raise
        raise click.ClickException(
            f"unexpected {type(exc).__name__}: {one_line(str(exc))} (run again with "
            "--traceback, or SAFEBEAT_DEBUG=1, to see where it happened)"
        ) from exc
