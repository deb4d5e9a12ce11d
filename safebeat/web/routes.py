"""The console's pages and actions as a Starlette app; see `safebeat.web.app`.

Pages are GETs and change nothing; every action is a POST that passes the read-only and
CSRF checks first, and whose form is bounded (`MAX_FORM_BYTES`, `FIELD_LIMITS`). Every
path built from an entry name is percent-encoded, so a name with `/..`, `?`, `#` or `%`
links to, and acts on, itself. Store calls run in the thread pool (stores are
synchronous).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from safebeat import display, limits
from safebeat.errors import SafebeatError
from safebeat.identity import format_window
from safebeat.ops.actions import ACTIONS, NOTE, Action, BadField, Kind
from safebeat.web import instants, pictures
from safebeat.web.console import AUDIT_ROWS, HISTORY_ROWS, Console
from safebeat.web.instants import local_zone
from safebeat.web.security import (
    CSRF_FIELD,
    AllowedHosts,
    CheckHost,
    Credentials,
    Csrf,
    HardeningHeaders,
    RequireCredentials,
    actor_of,
)

_HERE = Path(__file__).parent
#: What the entry's page says after pause or resume, by its `done` query value.
_DONE = {key: said for action in ACTIONS.values() for key, said in action.done_words.items()}
Endpoint = Callable[[Request], Any]
#: The largest action form the console reads, in bytes; a larger one is refused (413).
MAX_FORM_BYTES = 16 * 1024
#: The most characters each field of an action form may hold; a longer one is refused (400).
FIELD_LIMITS = {
    **{f.name: f.longest for action in ACTIONS.values() for f in action.form_fields},
    "confirm": 3,
}


def path_for(request: Request, route: str, **params: Any) -> str:
    """The path of `route` under the console's mount, each parameter percent-encoded
    whole (a `/`, `?`, `#` or `%` in an entry name stays in the name)."""
    quoted = {key: quote(str(value), safe="") for key, value in params.items()}
    return request.url_for(route, **quoted).path


class Refused(Exception):
    """An action's form refused before it is read further: the response says why."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class Pages:
    """The endpoints of one console: each renders a template from `Console`'s answers."""

    def __init__(self, console: Console, csrf: Csrf, hosts: AllowedHosts) -> None:
        self.console = console
        self.csrf = csrf
        self.hosts = hosts
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        zone = local_zone(console.app)
        # A note input takes as many characters as the actions read (`ops.actions.NOTE`).
        self.templates.globals["note_chars"] = NOTE.longest
        self.templates.filters.update(
            at=functools.partial(instants.instant_html, zone=zone),
            span=display.span,
            note=display.note,
            lag=display.lag,
            attempts=display.attempts,
        )

    def render(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> Response:
        html = self.templates.get_template(template).render(
            url=functools.partial(path_for, request),
            csrf_field=CSRF_FIELD,
            csrf_token=self.csrf.token(request),
            read_only=self.console.read_only,
            where=self.console.where(),
            **context,
        )
        response = HTMLResponse(html, status_code=status_code)
        self.csrf.set_cookie(request, response)
        return response

    def problem(self, request: Request, status_code: int, title: str, message: str) -> Response:
        return self.render(request, "problem.html", status_code, title=title, message=message)

    def failure(self, request: Request, exc: SafebeatError, status_code: int = 400) -> Response:
        return self.problem(request, status_code, "Problem", display.one_line(str(exc)))

    async def _read_page(
        self,
        request: Request,
        template: str,
        read: Callable[..., object],
        *args: object,
        as_name: str,
        **context: Any,
    ) -> Response:
        """Render `template` with what `read(*args)` returns, named `as_name`; a store that
        cannot be read is a 503 page."""
        try:
            found = await run_in_threadpool(read, *args)
        except SafebeatError as exc:
            return self.failure(request, exc, 503)
        context[as_name] = found
        return self.render(request, template, **context)

    async def entries(self, request: Request) -> Response:
        read = self.console.entries
        return await self._read_page(request, "entries.html", read, as_name="page", title="Entries")

    async def entry(self, request: Request) -> Response:
        name = request.path_params["name"]
        limit = _int(request.query_params.get("limit"), HISTORY_ROWS)
        done = _DONE.get(request.query_params.get("done", ""))
        return await self._entry_page(request, name, limit, done=done)

    async def _entry_page(
        self,
        request: Request,
        name: str,
        limit: int = HISTORY_ROWS,
        status_code: int = 200,
        *,
        done: str | None = None,
        refused: str | None = None,
        typed: Mapping[str, str] | None = None,
        missing: Response | None = None,
    ) -> Response:
        """An entry's page; after a refused action, with why (`refused`) and the values the
        operator typed (`typed`) back in the form. Without such an entry: `missing`, or 404."""
        try:
            found = await run_in_threadpool(self.console.entry, name, limit)
        except SafebeatError as exc:
            return self.failure(request, exc, 503)
        if found is None:
            return missing or self.problem(
                request, 404, "No such entry", f"no entry {name!r} is registered in this namespace"
            )
        now = found.now
        return self.render(
            request,
            "entry.html",
            status_code,
            title=name,
            entry=found,
            done=done,
            refused=refused,
            typed=dict(typed or {}),
            examples={
                "until": instants.example_instant(now, timedelta(days=1)),
                "start": instants.example_instant(now, -timedelta(hours=3)),
                "end": instants.example_instant(now, -timedelta(hours=1)),
            },
            actions=ACTIONS.values(),
            strip=pictures.window_strip(found.history),
            chart=pictures.lag_chart(found.history),
            kinds=pictures.KINDS,
        )

    async def audit(self, request: Request) -> Response:
        entry = request.query_params.get("entry") or None
        limit = _int(request.query_params.get("limit"), AUDIT_ROWS)
        read = self.console.audit
        return await self._read_page(
            request, "audit.html", read, entry, limit, as_name="records", entry=entry, title="Audit"
        )

    async def replicas(self, request: Request) -> Response:
        read = self.console.replicas
        return await self._read_page(
            request, "replicas.html", read, as_name="replicas", title="Replicas"
        )

    async def doctor(self, request: Request) -> Response:
        read = self.console.findings
        return await self._read_page(
            request, "doctor.html", read, as_name="findings", title="Doctor"
        )

    async def _action_form(self, request: Request) -> tuple[dict[str, str], Response | None]:
        """The POSTed form, or the response refusing it: read-only (403), larger than
        `MAX_FORM_BYTES` (413), without this browser's CSRF token (403), or a field longer
        than its limit (400)."""
        if self.console.read_only:
            message = "this console is read-only: it shows the schedule but changes nothing"
            return {}, self.problem(request, 403, "Read-only", message)
        try:
            form = await self._bounded_form(request)
        except Refused as refused:
            return {}, refused.response
        why = self.csrf.problem(request, form.get(CSRF_FIELD), self.hosts)
        if why is not None:
            return form, self.problem(request, 403, "Refused", why)
        for field, limit in FIELD_LIMITS.items():
            if len(form.get(field, "")) > limit:
                message = (
                    f"the {field} is {len(form[field]):,} characters long; the console "
                    f"takes at most {limit}"
                )
                return form, self.problem(request, 400, "Too long", message)
        return form, None

    async def _bounded_form(self, request: Request) -> dict[str, str]:
        """The url-encoded form of the request, read up to `MAX_FORM_BYTES`: the first
        value of each field, any byte sequence decoded (invalid UTF-8 replaced)."""
        too_large = Refused(
            PlainTextResponse(
                f"safebeat console: a form of more than {MAX_FORM_BYTES:,} bytes is refused",
                status_code=413,
            )
        )
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
            raise too_large
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise too_large
        text = body.decode("utf-8", "replace")
        form: dict[str, str] = {}
        for key, value in parse_qsl(text, keep_blank_values=True, errors="replace"):
            form.setdefault(key, value)
        return form

    def act(self, action: Action) -> Endpoint:
        """The POST of `action`'s form. An action with a preview shows it first, and runs
        with `confirm=yes`; one that publishes shows what it sent; the others go back to
        the entry's page, saying what was done (`done`)."""

        async def endpoint(request: Request) -> Response:
            name = request.path_params["name"]
            form, refused = await self._action_form(request)
            if refused is not None:
                return refused
            typed = {f.name: str(form.get(f.name, "")).strip() for f in action.form_fields}
            try:
                values = _values(action, typed, name)
                if action.preview is not None and form.get("confirm") != "yes":
                    found = await run_in_threadpool(self.console.preview, action, name, values)
                    return self._preview(request, action, name, typed, values=values, windows=found)
                act = functools.partial(self.console.act, action, name, values)
                result = await run_in_threadpool(act, actor=actor_of(request))
            except SafebeatError as exc:
                return await self._refused(request, action, name, typed, exc)
            if action.done is not None:
                target = path_for(request, "entry", name=name)
                return RedirectResponse(f"{target}?done={action.done(values)}", status_code=303)
            title = f"{action.done_title} {name}"
            return self.render(request, "published.html", title=title, name=name, result=result)

        return endpoint

    def _preview(
        self, request: Request, action: Action, name: str, typed: Mapping[str, str], **given: Any
    ) -> Response:
        """The windows (`given["windows"]`) `action` would cover, with its form's values
        (`given["values"]`) to confirm: `actions/<name>_preview.html`."""
        values: Mapping[str, Any] = given["values"]
        fields: dict[str, Any] = {
            **typed,
            **{
                f.name: format_window(values[f.name])
                for f in action.form_fields
                if f.kind is Kind.INSTANT and values[f.name] is not None
            },
        }
        template = f"actions/{action.name}_preview.html"
        title = f"{action.title} {name}"
        return self.render(
            request, template, title=title, name=name, windows=given["windows"], **fields
        )

    async def _refused(
        self,
        request: Request,
        action: Action,
        name: str,
        typed: Mapping[str, str],
        exc: SafebeatError,
    ) -> Response:
        """Why `action` was not done. For an action answered on the entry's page, a value
        refused is the form's fault: shown there with what was typed, so the note is not
        lost (404 only for an entry not registered)."""
        if action.done is None:
            return self.failure(request, exc)
        instant_typed = any(typed[f.name] for f in action.form_fields if f.kind is Kind.INSTANT)
        if instant_typed or isinstance(exc, limits.LimitError):
            why = display.one_line(str(exc))
            failure = self.failure(request, exc)  # a name no entry may have
            return await self._entry_page(
                request, name, status_code=400, refused=why, typed=typed, missing=failure
            )
        return self.failure(request, exc, 404)


class EntryNameConvertor(Convertor[str]):
    """An entry's name in a path: any characters, `/` and line breaks too, or none
    (Starlette's `path` stops at a line break, and its 404 would name no entry). A name
    no store may hold reaches the page, which refuses it by name."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return str(value)


register_url_convertor("entry_name", EntryNameConvertor())


def build(console: Console, credentials: Credentials, csrf: Csrf, hosts: AllowedHosts) -> Starlette:
    """The ASGI app serving `console` to the `hosts` it answers to, behind `credentials`
    (if any) and `csrf`, every response with the hardening headers."""
    pages = Pages(console, csrf, hosts)
    entry = "/entries/{name:entry_name}"
    routes = [
        Route("/", pages.entries, name="entries"),
        *(
            Route(f"{entry}/{name}", pages.act(action), methods=["POST"], name=name)
            for name, action in ACTIONS.items()
        ),
        Route(entry, pages.entry, name="entry"),
        Route("/audit", pages.audit, name="audit"),
        Route("/replicas", pages.replicas, name="replicas"),
        Route("/doctor", pages.doctor, name="doctor"),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        console.close()  # run when served on its own; a host app's mount never runs it

    return Starlette(
        routes=routes,
        middleware=[
            Middleware(HardeningHeaders),
            Middleware(CheckHost, hosts=hosts),
            Middleware(RequireCredentials, credentials=credentials),
        ],
        lifespan=lifespan,
    )


def _values(action: Action, typed: Mapping[str, str], name: str) -> dict[str, Any]:
    """The values of `action`'s form; a field that cannot be read is refused by name."""
    try:
        return action.values(typed)
    except BadField as exc:
        raise SafebeatError(f"{action.name} of {name!r}, {exc.field.name}: {exc}") from None


def _int(value: str | None, default: int) -> int:
    try:
        return max(1, min(int(value or default), 1000))
    except ValueError:
        return default
