"""What the commands share: -A, --url and --namespace after the command, the opened store,
--note, instants, and the refusal of a command that needs the app."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import click

from safebeat.cli.context import Options, choose_namespace, open_store
from safebeat.cli.errors import UsageProblem
from safebeat.config import Config, url_origin
from safebeat.display import BadInstant, parse_instant
from safebeat.errors import StoreError
from safebeat.stores import Store

F = TypeVar("F", bound=Callable[..., Any])


def _set_option(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Record -A, --url or --namespace given after the command, as if given before it."""
    if value is None or param.name is None:
        return
    options = ctx.ensure_object(Options)
    if param.name == "app_name" and options.app_given_to_celery and value != options.app_name:
        raise UsageProblem(
            f"-A {value} after the command, but `celery -A {options.app_name}` already "
            f"named the app: give -A once, before `safebeat`, as for every celery command"
        )
    setattr(options, param.name, value)


def store_options(command: F) -> F:
    """Accept -A, --url and --namespace after the command too (`safebeat status --url ...`)."""
    for option in reversed(
        [
            click.option(
                "-A",
                "--app",
                "app_name",
                metavar="APP",
                expose_value=False,
                callback=_set_option,
                help="As before the command: the Celery app.",
            ),
            click.option(
                "--url",
                metavar="URL",
                expose_value=False,
                callback=_set_option,
                help="As before the command: the store URL.",
            ),
            click.option(
                "--namespace",
                metavar="NAME",
                expose_value=False,
                callback=_set_option,
                help="As before the command: the namespace.",
            ),
        ]
    ):
        command = option(command)
    return command


note_option = click.option(
    "--note", help="Why, for the audit trail (`safebeat audit`).", metavar="TEXT"
)


def say(message: str) -> None:
    """Tell the operator something beside the output (on stderr)."""
    click.echo(message, err=True)


@contextmanager
def opened(options: Options, *, create: bool = False) -> Iterator[tuple[Config, Store]]:
    """The config (namespace chosen) and the store, closed after use.

    The store must exist unless `create`; see safebeat.cli.context.
    """
    config, store = open_store(options, create=create)
    try:
        yield choose_namespace(options, config, store, say), store
    except StoreError as exc:  # said with where the URL came from (a stale SAFEBEAT_URL?)
        exc.url_origin = url_origin(config)
        raise
    finally:
        store.close()


def require_app(options: Options, command: str, why: str = "publishes the task") -> None:
    """Refuse `command` (exit status 2) without -A: it needs the app `why`."""
    if options.app_name is None:
        raise UsageProblem(
            f"{command} {why}, so it needs the Celery app: give it with -A, "
            "as to `celery -A proj beat`"
        )


def instant(value: str, name: str) -> datetime:
    """Option `name`'s ISO 8601 instant; a bad one is a usage error naming the option."""
    try:
        return parse_instant(value)
    except BadInstant as exc:
        raise click.BadParameter(str(exc), param_hint=name) from None
