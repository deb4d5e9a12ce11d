"""A web console for safebeat: entries, their windows, replicas and the doctor's findings,
with pause, resume, trigger and backfill. Needs the `web` extra (`safebeat[web]`).

Run it on its own with `safebeat web -A proj`, or mount it in a Starlette or FastAPI app:

    app.mount("/safebeat", safebeat.web.app(celery_app))

It reads and writes through the same operations as the `safebeat` command line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette

from safebeat.cli.context import Options
from safebeat.web.console import Console
from safebeat.web.routes import build
from safebeat.web.security import LOOPBACK_HOSTS, AllowedHosts, Credentials, Csrf, is_loopback

__all__ = ["LOOPBACK_HOSTS", "AllowedHosts", "Credentials", "app", "is_loopback"]


def app(
    celery_app: Any | None = None,
    *,
    url: str | None = None,
    namespace: str | None = None,
    read_only: bool = False,
    credentials: Credentials | None = None,
    csrf_secret: bytes | None = None,
    allowed_hosts: Sequence[str] | AllowedHosts = (),
) -> Starlette:
    """The console of `celery_app`'s store and namespace, as an ASGI app.

    `url` and `namespace` override the app's settings (as `--url` and `--namespace` do);
    without `celery_app`, `url` (or `SAFEBEAT_URL`) names the store and trigger and
    backfill are unavailable. `read_only` shows everything and changes nothing.
    `credentials` (a token, or a user name and password) are required of every request;
    without them, put the console behind your own app's authentication. `csrf_secret`
    signs the forms' CSRF tokens (default: random per process, so a restart asks
    for a reload). The store is opened at the first request.

    The console answers only to requests whose `Host` is a loopback name
    (`LOOPBACK_HOSTS`, any port) or one of `allowed_hosts` (`ops.example.com`, or
    `ops.example.com:8443` for that port only; `*` for any, where your app or proxy
    checks the host itself), or exactly those of an `AllowedHosts`; any other gets 400. A
    POST's `Origin` must name one of them too. Raise ValueError for an empty credential or
    a bad allowed host.
    """
    console = Console(
        Options.for_app(celery_app, url=url, namespace=namespace), read_only=read_only
    )
    hosts = (
        allowed_hosts if isinstance(allowed_hosts, AllowedHosts) else AllowedHosts.of(allowed_hosts)
    )
    return build(console, credentials or Credentials(), Csrf(csrf_secret), hosts)
