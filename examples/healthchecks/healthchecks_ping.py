"""Healthchecks-style pings for safebeat: one "start" per window's run, one per its outcome.

What it shows: a monitoring integration written on safebeat's public hooks alone
(`safebeat.hooks`), in one module, with no change to safebeat. On the worker, once the
worker hook has decided that a delivery of a window runs (its first run, a Celery retry, a
takeover of a run that died), it pings `<base>/<slug>/start`; when that run returns, it
pings `<base>/<slug>` (success), `<base>/<slug>/fail` (failure) or `<base>/<slug>/log`
(the task asked Celery for a retry). Each ping carries `rid=<task id>`, the window's own id,
so the server pairs a run's start with its end. Duplicate deliveries, skipped by the
worker hook, ping nothing; neither do runs the store could not track.

What it needs: safebeat with its worker hook, and a Healthchecks server: healthchecks.io
or your own, one check per entry, addressed by a slug under a project's ping key (the
`<ping-key>/<slug>` URLs; add `?create=1` yourself to the base if the server should
create missing checks). How to use it, in the module that creates the Celery app:

    import healthchecks_ping

    healthchecks_ping.install("https://hc-ping.com/<ping-key>")

The slug is the entry's name, lowercased, with every run of other characters than
letters and digits made one `-` (`Weekly report` is `weekly-report`); give `slug=` a
function of the entry's name to choose otherwise, or one that returns None to leave an
entry out. A ping waits at most `timeout` seconds (3 by default), and one that fails is
logged and never fails the task. See README.md beside this file.
"""

from __future__ import annotations

import logging
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

from safebeat import hooks

logger = logging.getLogger("healthchecks_ping")

#: The ping after a run, by its outcome (the path after the slug).
ENDINGS = {"success": "", "failure": "/fail", "retry": "/log"}


def default_slug(entry: str) -> str:
    """The entry's name as a Healthchecks slug: `Weekly report` is `weekly-report`."""
    return re.sub(r"[^a-z0-9]+", "-", entry.lower()).strip("-")


@dataclass
class Pinger:
    """Pings `base` for each run of a window: its start, then its outcome."""

    base: str
    slug: Callable[[str], str | None] = default_slug
    timeout: float = 3.0
    sent: list[str] = field(default_factory=list)  # the URLs pinged, newest last

    def on_delivery(self, delivery: hooks.Delivery) -> None:
        if delivery.verdict in {"run", "takeover"}:
            self.ping(delivery.entry, "/start", delivery.task_id)

    def on_run_end(self, end: hooks.RunEnd) -> None:
        self.ping(end.entry, ENDINGS.get(end.outcome, "/fail"), end.task_id)

    def ping(self, entry: str, ending: str, run_id: str) -> None:
        slug = self.slug(entry)
        if slug is None:
            return
        url = f"{self.base.rstrip('/')}/{quote(slug)}{ending}?{urlencode({'rid': run_id})}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as answer:  # noqa: S310 - the configured http(s) base
                answer.read()
        except OSError as exc:  # the server is down or slow: the task goes on (logged)
            logger.warning("healthchecks: ping %s failed: %s", url, exc)
            return
        self.sent.append(url)


_installed: list[Pinger] = []


def install(
    base: str, *, slug: Callable[[str], str | None] = default_slug, timeout: float = 3.0
) -> Pinger:
    """Ping `base` (`https://hc-ping.com/<ping-key>`) for each run of every entry's windows."""
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"healthchecks: the base URL must be http(s)://..., not {base!r}")
    uninstall()
    pinger = Pinger(base, slug, timeout)
    hooks.on_delivery(pinger.on_delivery)
    hooks.on_run_end(pinger.on_run_end)
    _installed.append(pinger)
    return pinger


def uninstall() -> None:
    """Stop pinging."""
    while _installed:
        pinger = _installed.pop()
        hooks.remove(pinger.on_delivery)
        hooks.remove(pinger.on_run_end)
