"""Who may use the console, and proof that a POST came from its own page.

- Credentials: a token (`Authorization: Bearer <token>`, or as the password of HTTP basic
  auth with any user name) and/or a user name and password for HTTP basic auth. Without
  any, every request is let in: fine on a loopback address or behind the host app's own
  auth, which is why standalone serving refuses other addresses without them.
- CSRF: every action is a POST carrying a token that is the HMAC of a random per-browser
  cookie under a per-process secret; a POST without it, or whose `Origin` names another
  host, is refused. Only the host is compared: behind a proxy that ends TLS, the console
  sees `http` where the browser says `https`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

#: The cookie holding the browser's CSRF nonce.
CSRF_COOKIE = "safebeat_csrf"
#: The form field carrying the CSRF token.
CSRF_FIELD = "csrf_token"


@dataclass(frozen=True)
class Credentials:
    """What a request must present; with neither a token nor a user, nothing."""

    token: str | None = None
    username: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        if (self.username is None) != (self.password is None):
            raise ValueError(
                "basic auth needs both a user name and a password "
                "(--user and --password, or SAFEBEAT_WEB_USER and SAFEBEAT_WEB_PASSWORD)"
            )

    @property
    def required(self) -> bool:
        return bool(self.token or self.username)

    def accept(self, authorization: str | None) -> bool:
        """Whether an `Authorization` header value satisfies these credentials."""
        if not self.required:
            return True
        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() == "bearer":
            return self.token is not None and _same(value.strip(), self.token)
        if scheme.lower() == "basic":
            user, password = _basic(value)
            if self.token is not None and _same(password, self.token):
                return True
            return (
                self.username is not None
                and self.password is not None
                and _same(user, self.username)
                and _same(password, self.password)
            )
        return False


def _basic(value: str) -> tuple[str, str]:
    """The user name and password of a basic-auth value; empty where it is malformed."""
    try:
        user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    return user, password


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


class RequireCredentials:
    """ASGI middleware: a request without the credentials gets 401 and a basic-auth prompt."""

    def __init__(self, app: ASGIApp, credentials: Credentials) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = dict(scope["headers"]).get(b"authorization")
            if not self.credentials.accept(None if header is None else header.decode("latin-1")):
                response = PlainTextResponse(
                    "safebeat console: log in with the console's token or user name and password",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Basic realm="safebeat", charset="UTF-8"'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Csrf:
    """Signed double-submit tokens: `token(request)` for forms, `check(request, form)` on POST."""

    def __init__(self, secret: bytes | None = None) -> None:
        self.secret = secret or secrets.token_bytes(32)

    def _sign(self, nonce: str) -> str:
        return hmac.new(self.secret, nonce.encode(), hashlib.sha256).hexdigest()

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

    def problem(self, request: Request, submitted: str | None) -> str | None:
        """Why a POST is refused, or None if it carries this browser's token."""
        origin = request.headers.get("origin")
        if origin and urlsplit(origin).netloc != request.headers.get("host"):
            return f"this action came from another site ({origin}); use the console's own page"
        nonce = request.cookies.get(CSRF_COOKIE)
        if not nonce or not submitted or not hmac.compare_digest(submitted, self._sign(nonce)):
            return (
                "this form has expired or did not come from the console "
                "(missing or wrong CSRF token): reload the page and try again"
            )
        return None


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
    behind Starlette's AuthenticationMiddleware), else the basic-auth user name, else
    `token` for a bearer token, else `web <client address>` (an open loopback console)."""
    user = request.scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        name = getattr(user, "display_name", "") or getattr(user, "username", "")
        if name:
            return str(name)
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        name, _password = _basic(value)
        if name:
            return name
    if scheme.lower() == "bearer":
        return "token"
    client = request.client
    return f"web {client.host if client is not None else 'unknown'}"
