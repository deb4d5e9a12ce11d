"""safebeat's public hooks: where an integration (a monitor, a tracer) plugs into beat and workers.

Four hooks, each registered explicitly, by a call, in the module that creates the Celery app
(so beat and the workers both run it):

- `around_publish(hook, active=...)`: `hook(publish)` returns a context manager entered
  around one window's publish; `publish.headers` are the message's headers, which it may
  add to. `active()`, asked once per publish, says whether the hook would act now: while
  no hook is active, a publish costs nothing more than without hooks.
- `around_tick(hook)`: `hook(tick)` returns a context manager entered around one tick that
  may claim; once its body is done (after the `yield`), `tick` says what the tick did.
- `on_delivery(hook)`: `hook(delivery)` is called once the worker hook has decided what a
  delivery of a window does (`run`, `takeover`, `duplicate`, `defer`, `untracked`).
- `on_run_end(hook)`: `hook(end)` is called when a run that started (`run` or `takeover`)
  returns: its outcome (`success`, `failure`, `retry`) and how long it took.

Hooks are called in the order they were registered (publish and tick hooks are entered in
that order and left in the reverse one); registering one again changes nothing, `remove`
takes it out. A hook that raises is logged with its traceback and changes nothing else:
the publish, the tick, the task go on. Sentry Crons (`safebeat.contrib.sentry`) and
OpenTelemetry (`safebeat.contrib.opentelemetry`) are hooks like any other, registered by
this module when it is loaded; each acts only where the application set its library up.
See docs/extending.md, "An integration".
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from safebeat.entries import Entry
    from safebeat.records import Claim

logger = logging.getLogger("safebeat.hooks")


@dataclass(frozen=True, slots=True)
class Publish:
    """One window about to be published by beat."""

    entry: Entry
    claim: Claim  # the window, its task id (`claim.task_id`) and publish number (`attempts`)
    headers: MutableMapping[str, Any]  # the message's headers: a hook may add to them
    destination: str | None  # the entry's queue, else its routing key, else the default queue
    transport: str | None  # the broker's transport (`amqp`, `redis`...)


@dataclass(slots=True)
class Tick:
    """One tick of beat in a namespace; the counts are filled in once the tick is done."""

    namespace: str
    replica: str  # this replica's id, as `safebeat status` shows it
    claimed: int = 0  # windows claimed
    skipped: int = 0  # windows decided and not dispatched (policy, overlap, pause)
    republished: int = 0  # stale claims taken over to publish again
    busy: bool = False  # another replica held the tick lock: this tick did nothing


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the worker hook decided about one delivery of a window."""

    task: Any  # the Celery task (its `request` is this delivery's)
    namespace: str | None  # None: the worker's safebeat settings could not be read
    entry: str
    window: datetime
    task_id: str
    retries: int  # Celery's retry number of this delivery
    #: `run` (the body runs), `takeover` (runs again a run whose lease expired),
    #: `duplicate` (skipped: the window started or finished), `defer` (sent again for
    #: later: a run of it is alive), `untracked` (runs; the store could not tell).
    verdict: str


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a started run of a window ended, when its task returned."""

    task: Any
    namespace: str
    entry: str
    window: datetime
    task_id: str
    retries: int
    start: str  # how it started: `run` or `takeover`
    outcome: str  # `success`, `failure` or `retry`
    duration: timedelta


PublishHook = Callable[[Publish], AbstractContextManager[object]]
TickHook = Callable[[Tick], AbstractContextManager[object]]
H = TypeVar("H")


class _Hooks(Generic[H]):
    """The hooks of one kind, in registration order, each with its `active` predicate; the
    tuples are replaced on change, so a reader on another thread never sees them half done."""

    def __init__(self) -> None:
        self.hooks: tuple[H, ...] = ()
        self.pairs: tuple[tuple[H, Callable[[], bool] | None], ...] = ()

    def add(self, hook: H, active: Callable[[], bool] | None = None) -> None:
        if hook not in self.hooks:
            self.pairs = (*self.pairs, (hook, active))
            self.hooks = tuple(hook for hook, _ in self.pairs)

    def remove(self, hook: object) -> None:
        self.pairs = tuple(pair for pair in self.pairs if pair[0] != hook)
        self.hooks = tuple(hook for hook, _ in self.pairs)


_publish: _Hooks[PublishHook] = _Hooks()
_tick: _Hooks[TickHook] = _Hooks()
_delivery: _Hooks[Callable[[Delivery], object]] = _Hooks()
_run_end: _Hooks[Callable[[RunEnd], object]] = _Hooks()


def around_publish(hook: PublishHook, *, active: Callable[[], bool] | None = None) -> PublishHook:
    """Enter `hook(publish)` around each window's publish while `active()` (default: always)
    says it would act. Returns `hook`, so it may be used as a decorator."""
    _publish.add(hook, active)
    return hook


def around_tick(hook: TickHook) -> TickHook:
    """Enter `hook(tick)` around each tick that may claim. Returns `hook`."""
    _tick.add(hook)
    return hook


def on_delivery(hook: Callable[[Delivery], object]) -> Callable[[Delivery], object]:
    """Call `hook(delivery)` once the worker hook decided a delivery's verdict. Returns `hook`."""
    _delivery.add(hook)
    return hook


def on_run_end(hook: Callable[[RunEnd], object]) -> Callable[[RunEnd], object]:
    """Call `hook(end)` when a started run's task returns. Returns `hook`."""
    _run_end.add(hook)
    return hook


def remove(hook: object) -> None:
    """Take `hook` out of every hook it was registered on (nothing if it was not)."""
    for hooks in (_publish, _tick, _delivery, _run_end):
        hooks.remove(hook)


# --- what beat and the worker call ------------------------------------------------------


def publishing() -> tuple[PublishHook, ...]:
    """The publish hooks that would act now: () when none is registered or active (asked
    once per window: a plain loop, nothing allocated while none acts)."""
    acting: tuple[PublishHook, ...] = ()
    for hook, active in _publish.pairs:
        if active is None or _asks(active, hook):
            acting += (hook,)
    return acting


def _asks(active: Callable[[], bool], hook: object) -> bool:
    """`active()`; one that raises is logged and counts as no (the publish goes on)."""
    try:
        return active()
    except Exception:  # an integration must never stop a publish (logged)
        logger.exception("safebeat: hook %s failed (its active()); carrying on", _name(hook))
        return False


@contextmanager
def around(
    hooks: tuple[Callable[[Any], AbstractContextManager[object]], ...], argument: Any
) -> Iterator[None]:
    """Enter each of `hooks(argument)` in order around the body; leave them in reverse."""
    with ExitStack() as stack:
        for hook in hooks:
            stack.enter_context(_guarded(hook, argument))
        yield


@contextmanager
def ticking(namespace: str, replica: str) -> Iterator[Tick]:
    """Around one tick: the tick hooks entered, the `Tick` yielded for beat to fill in."""
    tick = Tick(namespace, replica)
    with around(_tick.hooks, tick):
        yield tick


def wants_deliveries() -> bool:
    """Whether a delivery hook is registered (else there is no `Delivery` to build)."""
    return bool(_delivery.hooks)


def wants_run_ends() -> bool:
    """Whether a run's end hook is registered."""
    return bool(_run_end.hooks)


def delivered(delivery: Delivery) -> None:
    """Tell every delivery hook about `delivery`."""
    for hook in _delivery.hooks:
        _call(hook, delivery)


def run_ended(end: RunEnd) -> None:
    """Tell every run's end hook about `end`."""
    for hook in _run_end.hooks:
        _call(hook, end)


def _call(hook: Callable[[Any], object], argument: Any) -> None:
    try:
        hook(argument)
    except Exception:  # an integration must never break a task (logged)
        logger.exception("safebeat: hook %s failed; carrying on", _name(hook))


@contextmanager
def _guarded(
    hook: Callable[[Any], AbstractContextManager[object]], argument: Any
) -> Iterator[None]:
    """`hook(argument)` around the body; what it raises entering or leaving is logged, and
    what the body raises goes through it (a span records it) and on, never swallowed."""
    try:
        manager = hook(argument)
        manager.__enter__()
    except Exception:  # an integration must never stop a publish or a tick (logged)
        logger.exception("safebeat: hook %s failed; carrying on", _name(hook))
        entered = False
    else:
        entered = True
    if not entered:  # the body runs outside the handler: its errors are not chained to it
        yield
        return
    try:
        yield
    except BaseException as exc:
        try:
            manager.__exit__(type(exc), exc, exc.__traceback__)
        except Exception as error:  # logged, unless it is the body's own, which goes on
            if error is not exc:
                logger.exception("safebeat: hook %s failed; carrying on", _name(hook))
        raise
    try:
        manager.__exit__(None, None, None)
    except Exception:  # logged; the publish or the tick is done
        logger.exception("safebeat: hook %s failed; carrying on", _name(hook))


def _name(hook: object) -> str:
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', hook)!s}"


#: The built-in integrations, each registering its hooks when imported (Sentry first: its
#: window's trace holds the publish's span). Loaded with this module, they stay on without a
#: line of setup, as before hooks existed; each is inert until the application sets its
#: library up (Sentry's Celery integration, an OpenTelemetry tracer provider).
BUILT_IN = ("safebeat.contrib.sentry", "safebeat.contrib.opentelemetry")

for _module in BUILT_IN:
    importlib.import_module(_module)

__all__ = [
    "Delivery",
    "Publish",
    "RunEnd",
    "Tick",
    "around_publish",
    "around_tick",
    "on_delivery",
    "on_run_end",
    "remove",
]
