"""An example store plugin: safebeat's SQLite store under the scheme `examplesqlite://`.

What it shows: the smallest package that adds a store to safebeat from outside it. Its
`pyproject.toml` names `ExampleStore` in the `safebeat.stores` entry point group under the
scheme `examplesqlite`; once installed, `safebeat_url = "examplesqlite:///beat.sqlite3"`
opens it in `celery beat -S safebeat.Scheduler`, the worker hook and the `safebeat`
commands. `test_example_store.py` beside it runs safebeat's store contract against it.

What it needs: safebeat. How to try it:

    pip install ./examples/store_plugin
    pytest examples/store_plugin/test_example_store.py

The URL is `examplesqlite://[user:password@]/<path>`, the path read as `sqlite:///<path>`
reads it. A user and password are accepted and ignored, as a store reaching a server would
take them: safebeat hides the password wherever it shows the URL (`display_url`, banners,
`safebeat status`, `safebeat doctor`, errors).
"""

from __future__ import annotations

from datetime import timedelta

from safebeat.errors import ConfigError
from safebeat.store_urls import redact
from safebeat.stores.sqlite import SqliteStore

SCHEME = "examplesqlite"


class ExampleStore(SqliteStore):
    """The SQLite store, opened from an `examplesqlite://` URL.

    A store implements `safebeat.stores.protocols.Store` (every method of `TickStore`,
    `ExecutionStore`, `EffectStore`, `AdminStore` and `RuntimeEntryStore`, with the
    guarantees their docstrings state) and is built as a `safebeat.stores.StoreOpener` is
    called: `(url, *, lock_timeout)`. Subclassing a built-in store is the short way; a
    store of its own implements the protocol and passes `safebeat.testing.stores`.
    """

    def __init__(self, url: str, *, lock_timeout: timedelta = timedelta(seconds=5)) -> None:
        scheme, separator, rest = url.partition("://")
        _, _, path = rest.rpartition("@")
        if scheme.lower() != SCHEME or not separator or not path.startswith("/"):
            raise ConfigError(
                f"safebeat_url {redact(url)!r}: write {SCHEME}:///<path of the SQLite file>"
            )
        # SQLite has no lock timeout: its busy timeout bounds each wait instead.
        super().__init__(f"sqlite://{path}")
        self.display_url = redact(url)
