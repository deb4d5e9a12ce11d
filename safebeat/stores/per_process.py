"""The store a worker (or an APScheduler executor) uses: one per process and thread.

Prefork workers fork: a child must never use a connection its parent opened, so a store
is opened anew in each process (and in each thread, for the threads pool: the SQL stores
keep one connection for one thread). The parent's store is left alone, never closed from
the child, since closing would end the parent's session too.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from safebeat.config import Config, config_from_app
from safebeat.stores import Store, store_from_config

_configs: weakref.WeakKeyDictionary[Any, Config] = weakref.WeakKeyDictionary()
_configs_mutex = threading.Lock()


class _Local(threading.local):
    pid: int = -1
    stores: dict[str, Store]

    def __init__(self) -> None:
        self.stores = {}


_local = _Local()


def config_of(app: Any) -> Config:
    """Return the safebeat settings of a Celery app, read once per app and process."""
    with _configs_mutex:
        config = _configs.get(app)
        if config is None:
            config = _configs[app] = config_from_app(app)
        return config


def store_of(app: Any) -> tuple[Config, Store]:
    """Return the app's settings and this process's (and thread's) store for them."""
    config = config_of(app)
    return config, store_for(config)


def store_for(config: Config) -> Store:
    """Return this process's (and thread's) store for `config`, opened on first use.

    With `safebeat_auto_migrate` on, the first use also creates or upgrades the tables,
    only if they are behind: a schema already current is read, not locked, so a worker's
    first task never waits behind a migrator (frozen or slow) holding the migration lock.
    A migration that is needed waits at most the store's lock timeout; if it fails, the
    error goes to the caller (the worker hook then runs the task untracked and counts it).
    """
    if _local.pid != os.getpid():
        # Forked (or first use): the inherited stores belong to the parent.
        _local.pid, _local.stores = os.getpid(), {}
    store = _local.stores.get(config.url)
    if store is None:
        store = store_from_config(config)
        if config.auto_migrate and store.schema_version() < store.expected_schema_version:
            store.migrate()  # a worker may start before any beat created the tables
        _local.stores[config.url] = store
    return store
