"""What every `safebeat` command starts from: the app, the settings, the store, the namespace.

Read-only commands never create a store: a SQLite file that does not exist is reported,
not created, and with nothing naming a store (no `-A`, `--url` or `SAFEBEAT_URL`) the
command says so instead of opening `safebeat.sqlite3` in the current folder. Without
`-A` or a namespace setting, the namespace is the store's only one (beat uses the app's
main name, which the CLI cannot guess).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safebeat.cli.app import load_app
from safebeat.config import Config, config_from_app, load_config
from safebeat.entries.app_entries import Schedule, beat_schedule
from safebeat.entries.runtime_definitions import with_runtime_entries
from safebeat.errors import SafebeatError
from safebeat.limits import check_namespace
from safebeat.ops.overview import listed
from safebeat.store_urls import backend_of
from safebeat.stores import Store, store_from_config


class NoStore(SafebeatError):
    """No store is configured, or the one configured does not exist (and must not be created)."""


class NamespaceUnknown(SafebeatError):
    """The namespace cannot be chosen (several in the store) or holds nothing."""


@dataclass
class Options:
    """The options shared by every command; the app, config and store are loaded on first use."""

    app_name: str | None = None
    url: str | None = None
    namespace: str | None = None
    _app: Any = field(default=None, repr=False)
    #: True under `celery -A proj safebeat`: celery loaded the app `app_name` names.
    app_given_to_celery: bool = False

    @classmethod
    def for_app(
        cls, app: Any | None, *, url: str | None = None, namespace: str | None = None
    ) -> Options:
        """Options for a Celery app given as an object (not imported by name), as by `-A`."""
        if app is None:
            return cls(url=url, namespace=namespace)
        return cls(app_name=app.main or "celery", url=url, namespace=namespace, _app=app)

    @property
    def app(self) -> Any | None:
        if self.app_name and self._app is None:
            self._app = load_app(self.app_name)
        return self._app

    def config(self) -> Config:
        """The settings as beat reads them, with --url and --namespace on top.

        Raise NoStore if nothing names a store.
        """
        app = self.app
        if app is None and not self.url and not os.environ.get("SAFEBEAT_URL"):
            raise NoStore("no store configured: give -A, --url or SAFEBEAT_URL")
        config = config_from_app(app) if app is not None else load_config({})
        if self.url:
            sources = {**config.sources, "url": "--url"}
            config = dataclasses.replace(config, url=self.url, sources=sources)
        if self.namespace:
            namespace = check_namespace(self.namespace, "--namespace")
            config = dataclasses.replace(config, namespace=namespace)
        return config

    def namespace_is_given(self, config: Config) -> bool:
        """Whether the namespace was chosen: --namespace, a setting, or -A (the app's name)."""
        return bool(self.namespace or self.app_name or "namespace" in config.sources)

    def schedule(self, config: Config, store: Store | None = None) -> Schedule | None:
        """The schedule the app's beat runs (with -A), else None; with `store`, the entries
        added at run time in it too (beat runs them beside the code's)."""
        app = self.app
        if app is None:
            return None
        schedule = beat_schedule(app, config)
        if store is None:
            return schedule
        return with_runtime_entries(
            schedule,
            store.runtime_entries(config.namespace),
            app_timezone=app.timezone,
            config=config,
        )


def missing_store(config: Config) -> str | None:
    """Why the configured store does not exist yet, or None if it may.

    Only a SQLite file can be known missing without connecting; opening it would create it.
    """
    if backend_of(config.url) != "sqlite":
        return None
    from safebeat.stores.sqlite import path_of  # noqa: PLC0415

    path = Path(path_of(config.url))
    if path.exists():
        return None
    return (
        f"no SQLite store at {path.absolute()}: beat has not run with it (beat creates it); "
        "run this where beat runs, or give -A, --url or SAFEBEAT_URL"
    )


def open_store(options: Options, *, create: bool = False) -> tuple[Config, Store]:
    """The settings and the store; a store that does not exist is NoStore unless `create`."""
    config = options.config()
    if not create:
        problem = missing_store(config)
        if problem:
            raise NoStore(problem)
    return config, store_from_config(config)


def choose_namespace(
    options: Options, config: Config, store: Store, say: Callable[[str], None]
) -> Config:
    """`config` with the namespace to use: the one given, else the store's only one.

    Without a namespace given, a store holding one namespace gives it (and `say` tells so);
    several raise NamespaceUnknown listing them; none keeps the default.
    """
    if options.namespace_is_given(config):
        return config
    found = store.namespaces()
    if len(found) == 1:
        say(f"safebeat: using namespace {found[0]!r}, the only one in {store.display_url}")
        return dataclasses.replace(config, namespace=found[0])
    if len(found) > 1:
        raise NamespaceUnknown(
            f"{store.display_url} holds namespaces {listed(found)}: choose one with "
            "--namespace (or give the app with -A)"
        )
    return config
