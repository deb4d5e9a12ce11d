"""`celery -A proj safebeat ...`: the `safebeat` commands inside Celery's own command line.

Celery adds every command of the `celery.commands` entry point group to `celery` when it
starts, for a worker or beat too; so this module stays small and imports the commands
(`safebeat.cli`) only when `celery safebeat` lists or runs them. The app and the broker
come from celery's global options (`-A`, `-b`, `--workdir`, ...), which celery applies
before `safebeat` runs; `--url`, `--namespace` and `--traceback` are safebeat's own.
"""

from __future__ import annotations

from typing import Any

import click


def _commands() -> click.Group:
    from safebeat.cli import main  # noqa: PLC0415 - only when `celery safebeat` runs

    return main


class SafebeatCommands(click.Group):
    """The `safebeat` group's commands, loaded on first use; errors are one line, as there."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return _commands().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return _commands().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        from safebeat.cli import invoke_with_one_line_errors  # noqa: PLC0415

        return invoke_with_one_line_errors(ctx, lambda: super(SafebeatCommands, self).invoke(ctx))


def _given_app(ctx: click.Context) -> str | None:
    """What celery's `-A` (or $APP) named, or None where celery fell back to its default app."""
    given = ctx.find_root().params.get("app")
    if given is None or isinstance(given, str):
        return given
    return str(getattr(given, "main", None) or given)  # an app object, from Python code


@click.group("safebeat", cls=SafebeatCommands)
@click.option("--url", help="Store URL; overrides safebeat_url and $SAFEBEAT_URL.", metavar="URL")
@click.option("--namespace", help="Namespace; overrides safebeat_namespace.", metavar="NAME")
@click.option(
    "--traceback",
    is_flag=True,
    help="Show the traceback of an unexpected error (also SAFEBEAT_DEBUG=1).",
)
@click.pass_context
def safebeat(ctx: click.Context, url: str | None, namespace: str | None, traceback: bool) -> None:
    """Operate safebeat: inspect the store, check the setup, migrate and prune.

    The commands of the `safebeat` program, with the app and broker given to `celery`.
    """
    from safebeat.cli_context import Options  # noqa: PLC0415

    app_name = _given_app(ctx)
    celery_context = ctx.obj  # celery's CLIContext: the app it loaded (or its default app)
    app = getattr(celery_context, "app", None) if app_name is not None else None
    ctx.obj = Options(app_name, url, namespace, _app=app, app_given_to_celery=app is not None)
