"""The `safebeat` command line (also `python -m safebeat`), configured like the scheduler.

safebeat -A proj migrate          # settings of the Celery app `proj`
safebeat --url postgresql://... migrate
SAFEBEAT_URL=... safebeat migrate
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import click

from safebeat.config import Config, config_from_app, load_config
from safebeat.errors import SafebeatError
from safebeat.stores import Store, store_from_config


@dataclass(frozen=True)
class Options:
    app: str | None
    url: str | None

    def config(self) -> Config:
        if self.app:
            from celery.app.utils import find_app  # noqa: PLC0415 - only with -A

            config = config_from_app(find_app(self.app))
        else:
            config = load_config({})
        return dataclasses.replace(config, url=self.url) if self.url else config

    def store(self) -> tuple[Config, Store]:
        config = self.config()
        return config, store_from_config(config)


@click.group()
@click.option("-A", "--app", help="The Celery app whose settings to use, as for `celery -A`.")
@click.option("--url", help="Store URL; overrides safebeat_url and $SAFEBEAT_URL.", metavar="URL")
@click.pass_context
def main(ctx: click.Context, app: str | None, url: str | None) -> None:
    """Operate safebeat's store."""
    ctx.obj = Options(app, url)


@main.command()
@click.pass_obj
def migrate(options: Options) -> None:
    """Create or upgrade safebeat's tables in the store (safe to run from many places)."""
    try:
        _, store = options.store()
        try:
            version = store.migrate()
        finally:
            store.close()
    except SafebeatError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{store.display_url}: schema at version {version}")
