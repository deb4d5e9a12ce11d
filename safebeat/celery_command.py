"""`celery -A proj safebeat ...`: the `safebeat` commands inside Celery's own command line.

Celery adds every command of the `celery.commands` entry point group to `celery` when it
starts, for a worker or beat too; so this module stays small, and the commands' modules
(safebeat.cli.group) are imported only when `celery safebeat` lists or runs them. The app
and the broker come from celery's global options (`-A`, `-b`, `--workdir`, ...), which
celery applies before `safebeat` runs; `--url`, `--namespace` and `--traceback` are
safebeat's own.
"""

from __future__ import annotations

import click

from safebeat.cli.group import Commands, global_options


def _given_app(ctx: click.Context) -> str | None:
    """What celery's `-A` (or $APP) named, or None where celery fell back to its default app."""
    given = ctx.find_root().params.get("app")
    if given is None or isinstance(given, str):
        return given
    return str(getattr(given, "main", None) or given)  # an app object, from Python code


@click.group("safebeat", cls=Commands)
@global_options
@click.pass_context
def safebeat(ctx: click.Context, url: str | None, namespace: str | None, traceback: bool) -> None:
    """Operate safebeat: inspect the store, check the setup, migrate and prune.

    The commands of the `safebeat` program, with the app and broker given to `celery`.
    """
    from safebeat.cli.context import Options  # noqa: PLC0415

    app_name = _given_app(ctx)
    celery_context = ctx.obj  # celery's CLIContext: the app it loaded (or its default app)
    app = getattr(celery_context, "app", None) if app_name is not None else None
    ctx.obj = Options(app_name, url, namespace, _app=app, app_given_to_celery=app is not None)
