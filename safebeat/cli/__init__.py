"""The `safebeat` command line (also `python -m safebeat`), configured like the scheduler.

safebeat -A proj status           # settings (and schedule) of the Celery app `proj`
safebeat --url postgresql://... history weekly-report
SAFEBEAT_URL=... safebeat health

Human tables by default, `--json` for scripts. Errors are one line and a non-zero exit;
store URLs are always shown without their password. Each group of commands has its own
module here; safebeat.cli.group names them (the same table serves `celery safebeat`).
"""

from __future__ import annotations

import click

from safebeat.cli.group import Commands, global_options


@click.group(cls=Commands)
@click.option("-A", "--app", "app_name", help="The Celery app whose settings to use (`celery -A`).")
@global_options
@click.pass_context
def main(
    ctx: click.Context,
    app_name: str | None,
    url: str | None,
    namespace: str | None,
    traceback: bool,
) -> None:
    """Operate safebeat: inspect the store, check the setup, migrate and prune."""
    from safebeat.cli.context import Options  # noqa: PLC0415 - see safebeat.cli.group

    ctx.obj = Options(app_name, url, namespace)


__all__ = ["main"]
