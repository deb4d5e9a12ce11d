"""`safebeat web`: serve the web console (the `web` extra)."""

from __future__ import annotations

import os

import click

from safebeat.cli.context import Options
from safebeat.cli.errors import UsageProblem
from safebeat.cli.options import opened, store_options

#: The variables of `safebeat web`'s options (see also `safebeat.config.COMMAND_VARIABLES`).
CREDENTIAL_VARIABLES = ("SAFEBEAT_WEB_TOKEN", "SAFEBEAT_WEB_USER", "SAFEBEAT_WEB_PASSWORD")


def _bind(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isascii() or not port.isdigit():
        raise click.BadParameter(
            f"{value!r} is not HOST:PORT, e.g. 127.0.0.1:8765", param_hint="--bind"
        )
    if not 0 < int(port) < 65536:
        raise click.BadParameter(
            f"{value!r}: port {int(port)} is not a TCP port (1 to 65535)", param_hint="--bind"
        )
    return host.strip("[]"), int(port)


def _empty_variables(given: dict[str, str | None]) -> list[str]:
    """The credential variables set to "" where no option gave a value: click reads an
    empty variable as unset, which would serve without the credential meant."""
    return [
        var
        for var, value in zip(CREDENTIAL_VARIABLES, given.values(), strict=True)
        if value is None and os.environ.get(var) == ""
    ]


@click.command()
@click.option(
    "--bind",
    default="127.0.0.1:8765",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to serve. Another address than loopback needs --token or --user/--password.",
)
@click.option(
    "--token",
    envvar="SAFEBEAT_WEB_TOKEN",
    metavar="TOKEN",
    help="Require this token: `Authorization: Bearer TOKEN`, or as the basic-auth password "
    "[env: SAFEBEAT_WEB_TOKEN].",
)
@click.option(
    "--user",
    envvar="SAFEBEAT_WEB_USER",
    metavar="NAME",
    help="Require HTTP basic auth with this user name [env: SAFEBEAT_WEB_USER].",
)
@click.option(
    "--password",
    envvar="SAFEBEAT_WEB_PASSWORD",
    metavar="PASSWORD",
    help="The basic-auth password of --user [env: SAFEBEAT_WEB_PASSWORD].",
)
@click.option(
    "--token-actor",
    envvar="SAFEBEAT_WEB_TOKEN_ACTOR",
    default="token",
    show_default=True,
    metavar="NAME",
    help="Who a request with the token acts as in the audit trail [env: SAFEBEAT_WEB_TOKEN_ACTOR].",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar="SAFEBEAT_WEB_ALLOWED_HOSTS",
    metavar="HOST[:PORT]",
    help="Also answer requests for this host, as a proxy in front names it (repeat for "
    "more; * for any, with credentials only). Loopback names and the --bind address on its "
    "port are always answered; other hosts get 400 "
    "[env: SAFEBEAT_WEB_ALLOWED_HOSTS, space-separated].",
)
@click.option(
    "--read-only",
    is_flag=True,
    envvar="SAFEBEAT_WEB_READ_ONLY",
    help="Show everything, change nothing: no pause, resume, trigger or backfill.",
)
@store_options
@click.pass_obj
def web(
    options: Options,
    *,
    bind: str,
    token: str | None,
    user: str | None,
    password: str | None,
    token_actor: str,
    allowed_hosts: tuple[str, ...],
    read_only: bool,
) -> None:
    """Serve the web console: entries, history, replicas, doctor; pause, trigger, backfill.

    Needs the `web` extra (pip install "safebeat[web]"); trigger and backfill need -A.
    """
    host, port = _bind(bind)
    try:
        import uvicorn  # noqa: PLC0415 - the web extra is optional

        from safebeat import web as console  # noqa: PLC0415
    except ImportError as exc:
        raise click.ClickException(
            f'safebeat web needs the web extra ({exc.name} is missing): pip install "safebeat[web]"'
        ) from exc
    empty = _empty_variables({"token": token, "user": user, "password": password})
    if empty:
        raise UsageProblem(
            f"{' and '.join(empty)} set but empty: an empty credential would let every "
            "request in; give it a value, or unset it"
        )
    try:
        credentials = console.Credentials(
            token=token, username=user, password=password, token_actor=token_actor
        )
        hosts = console.AllowedHosts.bound(host, port, allowed_hosts)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from exc
    if not credentials.required and not console.is_loopback(host):
        raise UsageProblem(
            f"--bind {bind} is reachable from other machines, and the console pauses and "
            "triggers entries: give --token (or SAFEBEAT_WEB_TOKEN) or --user and --password, "
            "or bind 127.0.0.1"
        )
    if not credentials.required and hosts.any:
        raise UsageProblem(
            "--allowed-host * answers a page of any site whose name resolves to this "
            "machine (DNS rebinding), and the console has no credentials: list the host "
            "names instead, or give --token or --user and --password"
        )
    options.app  # noqa: B018 - import the app now: a bad -A is an error before serving
    application = console.app(
        options.app,
        url=options.url,
        namespace=options.namespace,
        read_only=read_only,
        credentials=credentials,
        allowed_hosts=hosts,
    )
    with opened(options) as (config, store):  # fail now, in one line, not at the first page
        where = f"{store.display_url}, namespace {config.namespace!r}"
    mode = "read-only" if read_only else "read-write"
    click.echo(f"safebeat web: {where} ({mode}) on http://{bind}/", err=True)
    if not allowed_hosts and not console.is_loopback(host):
        click.echo(
            f"safebeat web: answering requests for {hosts} only; add the names clients use "
            "with --allowed-host",
            err=True,
        )
    uvicorn.run(application, host=host, port=port, log_level="warning")
