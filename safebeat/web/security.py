"""Who may use the console, which names it answers to, and proof that a POST came from
its own page.

- Credentials: a token (`Authorization: Bearer <token>`, or as the password of HTTP basic
  auth with any user name) and/or a user name and password for HTTP basic auth. Without
  any, every request is let in: fine on a loopback address or behind the host app's own
  auth, which is why standalone serving refuses other addresses without them. An empty
  token, user name or password is refused, never taken for "no credentials".
- Hosts: a request whose `Host` is not one the console answers to (loopback names, the
  address it is bound to, and the names given for a proxy) gets 400, so a page whose
  domain resolves to 127.0.0.1 (DNS rebinding) reads and changes nothing.
- CSRF: every action is a POST carrying a token that is the HMAC of a random per-browser
  cookie under a per-process secret; a POST without it, or whose `Origin` names a host
  the console does not answer to, is refused. Only the host is compared: behind a proxy
  that ends TLS, the console sees `http` where the browser says `https`.
- Headers: every response forbids framing, MIME sniffing and cross-origin referrers, and
  pages may load nothing but the console's own stylesheet.
- The audit actor: only what was checked (the host app's signed-in user, the basic-auth
  user whose password matched, the token's actor), else the client's address.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The cookie holding the browser's CSRF nonce.
CSRF_COOKIE = "safebeat_csrf"
#: The form field carrying the CSRF token.
CSRF_FIELD = "csrf_token"


@dataclass(frozen=True)
class Credentials:
    """What a request must present; with neither a token nor a user, nothing.

    `token_actor` is who a request bearing the token acts as in the audit trail.
    """

    token: str | None = None
    username: str | None = None
    password: str | None = None
    token_actor: str = "token"  # noqa: S105 - a name for the audit trail, not a secret

    def __post_init__(self) -> None:
        if (self.username is None) != (self.password is None):
            raise ValueError(
                "basic auth needs both a user name and a password "
                "(--user and --password, or SAFEBEAT_WEB_USER and SAFEBEAT_WEB_PASSWORD)"
            )
        for given, what in (
            (self.token, "the token (--token, SAFEBEAT_WEB_TOKEN)"),
            (self.username, "the user name (--user, SAFEBEAT_WEB_USER)"),
            (self.password, "the password (--password, SAFEBEAT_WEB_PASSWORD)"),
        ):
            if given is not None and not given.strip():
                raise ValueError(
                    f"{what} is empty: an empty credential would let every request in; "
                    "give a value, or leave it out for a console without credentials"
                )
        if not self.token_actor.strip():
            raise ValueError("the token's actor (--token-actor) is empty: give a name")

    @property
    def required(self) -> bool:
        return self.token is not None or self.username is not None

    def accept(self, authorization: str | None) -> bool:
        """Whether an `Authorization` header value satisfies these credentials."""
        return self.actor(authorization) is not None

    def actor(self, authorization: str | None) -> str | None:
        """Who an `Authorization` header value proves to be: the basic-auth user name whose
        password matched, or `token_actor` for the token; "" where nothing is required
        (nobody is proven); None where it does not satisfy these credentials."""
        if not self.required:
            return ""
        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() == "bearer":
            given = value.strip()
            return self.token_actor if self.token and _same(given, self.token) else None
        if scheme.lower() == "basic":
            user, password = _basic(value)
            if self.token is not None and _same(password, self.token):
                return self.token_actor  # any user name: the name proves nothing
            if (
                self.username is not None
                and self.password is not None
                and _same(user, self.username)
                and _same(password, self.password)
            ):
                return self.username
        return None


def _basic(value: str) -> tuple[str, str]:
    """The user name and password of a basic-auth value; empty where it is malformed."""
    try:
        user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    return user, password


def _same(given: str, expected: str) -> bool:
    """Compare in constant time, as bytes: `compare_digest` refuses str beyond ASCII."""
    return hmac.compare_digest(_bytes(given), _bytes(expected))


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "replace")  # a lone surrogate too


#: The names of this machine a console always answers to, on any port.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def _host_and_port(value: str) -> tuple[str, str | None]:
    """`host[:port]` (a `Host` header, or an allowed name) as its lower-case host, IPv6 in
    brackets, and its port; the port is None where none is given."""
    value = value.strip().lower()
    if value.startswith("["):
        host, bracket, rest = value.partition("]")
        port = rest[1:] if rest.startswith(":") else None
        return host + bracket, port
    if value.count(":") > 1:  # a bare IPv6 address
        return f"[{value}]", None
    host, colon, port = value.partition(":")
    return host, port if colon else None


@dataclass(frozen=True)
class AllowedHosts:
    """The `Host` values a console answers to: each `name` (any port) or `name:port`,
    or every one with `*` (where something in front checks the host)."""

    names: frozenset[tuple[str, str | None]]
    any: bool = False

    @classmethod
    def of(cls, names: Iterable[str], *, loopback: bool = True) -> AllowedHosts:
        """These names, and with `loopback` the loopback names on any port; ValueError
        names one that is not a host."""
        listed = list(names)
        parsed: set[tuple[str, str | None]] = set()
        if loopback:
            parsed |= {(host, None) for host in LOOPBACK_HOSTS}
        for name in listed:
            if name.strip() == "*":
                continue
            host, port = _host_and_port(name)
            if not host or "/" in name or "@" in name or (port is not None and not _port(port)):
                raise ValueError(
                    f"allowed host {name!r}: give a host name or address, with or without a "
                    "port (ops.example.com, ops.example.com:8443, 10.0.0.5), or *"
                )
            parsed.add((host, port))
        return cls(frozenset(parsed), any=any(name.strip() == "*" for name in listed))

    @classmethod
    def bound(cls, host: str, port: int, names: Iterable[str] = ()) -> AllowedHosts:
        """What a console bound to `host:port` answers to: the loopback names and that
        address on that port, and `names` (a proxy's)."""
        listed = [f"{name}:{port}" for name in LOOPBACK_HOSTS]
        if host not in ("0.0.0.0", "::", ""):  # noqa: S104 - a wildcard is no Host
            listed.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        return cls.of([*listed, *names], loopback=False)

    def allows(self, value: str | None) -> bool:
        """Whether a `Host` value (or an `Origin`'s host and port) is one of these."""
        if self.any:
            return True
        if not value:
            return False
        host, port = _host_and_port(value)
        if port is not None and not _port(port):
            return False
        return (host, port) in self.names or (host, None) in self.names

    def __str__(self) -> str:
        if self.any:
            return "any host"
        shown = sorted(host if port is None else f"{host}:{port}" for host, port in self.names)
        return ", ".join(shown)


def _port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) < 65536


class CheckHost:
    """ASGI middleware: a request whose `Host` the console does not answer to gets 400
    (what stops DNS rebinding: a page on another domain that resolves to this address)."""

    def __init__(self, app: ASGIApp, hosts: AllowedHosts) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self.hosts.any:
            host = Headers(scope=scope).get("host")
            if not self.hosts.allows(host):
                response = PlainTextResponse(
                    f"safebeat console: it does not answer to the host {host!r} "
                    f"(it answers to {self.hosts}); served behind a proxy or under another "
                    "name, add that name with --allowed-host or allowed_hosts=[...]",
                    status_code=400,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


#: Sent with every response of the console.
HARDENING_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class HardeningHeaders:
    """ASGI middleware: every response forbids framing (clickjacking), MIME sniffing and
    referrers to other sites, and lets a page load only the console's stylesheet."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_hardened(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HARDENING_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_hardened)


#: Where RequireCredentials leaves who the request proved to be, for `actor_of`.
ACTOR_KEY = "safebeat.actor"


class RequireCredentials:
    """ASGI middleware: a request without the credentials gets 401 and a basic-auth prompt;
    one with them carries who they prove (`ACTOR_KEY` in its scope)."""

    def __init__(self, app: ASGIApp, credentials: Credentials) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = dict(scope["headers"]).get(b"authorization")
            actor = self.credentials.actor(None if header is None else header.decode("latin-1"))
            if actor is None:
                response = PlainTextResponse(
                    "safebeat console: log in with the console's token or user name and password",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Basic realm="safebeat", charset="UTF-8"'},
                )
                await response(scope, receive, send)
                return
            scope = {**scope, ACTOR_KEY: actor} if actor else scope
        await self.app(scope, receive, send)


class Csrf:
    """Signed double-submit tokens: `token(request)` for forms, `check(request, form)` on POST."""

    def __init__(self, secret: bytes | None = None) -> None:
        self.secret = secret or secrets.token_bytes(32)

    def _sign(self, nonce: str) -> str:
        return hmac.new(self.secret, _bytes(nonce), hashlib.sha256).hexdigest()

    def token(self, request: Request) -> str:
        """The token for this browser's forms; a new browser gets a nonce to set as cookie."""
        nonce = request.cookies.get(CSRF_COOKIE)
        if not nonce:
            nonce = getattr(request.state, "csrf_nonce", None) or secrets.token_urlsafe(32)
            request.state.csrf_nonce = nonce
        return self._sign(nonce)

    def set_cookie(self, request: Request, response: Response) -> None:
        """Store the nonce a new browser was given (HttpOnly, SameSite=Strict)."""
        nonce = getattr(request.state, "csrf_nonce", None)
        if nonce:
            response.set_cookie(
                CSRF_COOKIE,
                nonce,
                path=request.scope.get("root_path") or "/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )

    def problem(self, request: Request, submitted: str | None, hosts: AllowedHosts) -> str | None:
        """Why a POST is refused, or None if it carries this browser's token and, if it
        says where it came from, came from a host the console answers to (any value of
        either is an answer, never an error)."""
        origin = request.headers.get("origin")
        if origin is not None and not _same_site(origin, request, hosts):
            return f"this action came from another site ({origin}); use the console's own page"
        nonce = request.cookies.get(CSRF_COOKIE)
        if not nonce or not submitted or not _same(submitted, self._sign(nonce)):
            return (
                "this form has expired or did not come from the console "
                "(missing or wrong CSRF token): reload the page and try again"
            )
        return None


def _same_site(origin: str, request: Request, hosts: AllowedHosts) -> bool:
    """Whether `Origin` names a host the console answers to; with `*`, the request's own."""
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:  # an unbalanced [
        return False
    if hosts.any:
        return bool(netloc) and netloc == request.headers.get("host")
    return hosts.allows(netloc)


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def actor_of(request: Request) -> str:
    """Who a request acts as, for the audit trail: the host app's signed-in user (a mount
    behind Starlette's AuthenticationMiddleware), else who the console's credentials
    proved (the basic-auth user, the token's actor), else `web <client address>` (an open
    console). Never a name the client merely sent."""
    user = request.scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        name = getattr(user, "display_name", "") or getattr(user, "username", "")
        if name:
            return str(name)
    proven = request.scope.get(ACTOR_KEY)
    if proven:
        return str(proven)
    client = request.client
    return f"web {client.host if client is not None else 'unknown'}"
