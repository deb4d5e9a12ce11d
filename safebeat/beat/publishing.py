"""Turning a claimed window into a Celery message: the task id, the headers, the options.

`Publisher.send` builds and publishes one window's message. For the common entry (a task
whose class keeps Celery's own `apply_async`, options that only route or encode) it calls
the two steps `send_task` ends with, `app.amqp.create_task_message` and
`app.amqp.send_task_message`, and declares each queue once per broker connection instead
of once per message: the same message, half the time (see docs/performance.md). Anything
else goes through the task's own `apply_async`, or `send_task` for a task this process
does not know. Either way the task routers and the publish signals run as they do in stock
beat.
"""

from __future__ import annotations

import functools
import os
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import celery
from celery import Celery
from celery.app import amqp as celery_amqp
from celery.app.defaults import DEFAULTS as CELERY_DEFAULTS
from celery.app.routes import MapRoute
from celery.app.task import Task
from celery.utils.nodenames import anon_nodename

from safebeat import hooks
from safebeat.beat.declarations import QueueDeclarations
from safebeat.beat.message_fields import (
    Arguments,
    argument_reprs,
    has_lazy_arguments,
    headers_for,
    message_for,
    seconds_left,
)
from safebeat.beat.message_template import (
    PER_WINDOW_HEADERS,
    MessageShape,
    MessageTemplate,
    publish_receivers,
)
from safebeat.entries import Entry
from safebeat.identity import format_window
from safebeat.records import Claim

#: Options the direct path passes on exactly as `send_task` would; any other option (eta,
#: countdown, expires, links, shadow, stamping...) takes Celery's full path.
DIRECT_OPTIONS = frozenset(
    {
        "task_id",
        "headers",
        "queue",
        "exchange",
        "exchange_type",
        "routing_key",
        "priority",
        "serializer",
        "compression",
        "delivery_mode",
        "ignore_result",
        "time_limit",
        "soft_time_limit",
        "retry",
        "retry_policy",
    }
)


#: The `ignore_result` header of a task this process does not know, when nothing sets it:
#: `send_task` sends None from Celery 5.7, False before.
_UNSET_IGNORE_RESULT = None if tuple(celery.VERSION[:2]) >= (5, 7) else False


#: The stand-in window a template is built from ahead of its entry's first real one.
_PREWARM_WINDOW = datetime(2000, 1, 1, tzinfo=timezone.utc)
_PREWARM_TASK_ID = "00000000-0000-0000-0000-000000000000"


def task_goes_direct(task: Task) -> bool:
    """Whether Celery would build `task`'s message as `send_task` does (no override of
    `apply_async` or `shadow_name`, no argument conversion, consistent time limits)."""
    cls = type(task)
    return (
        cls.apply_async is Task.apply_async
        and cls.shadow_name is Task.shadow_name
        and not getattr(task, "__v2_compat__", False)
        and getattr(task, "_dump_pydantic_arguments", None) is None
        and not (
            task.soft_time_limit and task.time_limit and task.soft_time_limit > task.time_limit
        )
    )


@functools.lru_cache(maxsize=4)
def window_text(window: datetime) -> str:
    """`format_window(window)`: a round's claims share a few windows."""
    return format_window(window)


_ORIGIN: list[tuple[int, str]] = []


def origin_name() -> str:
    """This process's node name for a message's `origin` (again after a fork)."""
    pid = os.getpid()
    if not _ORIGIN or _ORIGIN[0][0] != pid:
        _ORIGIN[:] = [(pid, anon_nodename())]
    return _ORIGIN[0][1]


def _publishing_a_callback() -> bool:
    """Whether Celery is publishing a task's callback, which it retries message by message
    (Celery 5.7 and later mark it in a context variable; earlier releases have no such
    mode, and no such variable)."""
    marker = getattr(celery_amqp, "_callback_publish_retry", None)
    return bool(marker is not None and marker.get())


def _repr_levels(conf: Any) -> int:
    """How deep a message's argsrepr and kwargsrepr look: `task_repr_maxlevels` from
    Celery 5.7; earlier releases have no such setting and always look 3 levels deep."""
    if "task_repr_maxlevels" not in CELERY_DEFAULTS:
        return 3
    return int(conf.task_repr_maxlevels)


def _destination(options: Mapping[str, Any], app: Any) -> str | None:
    """The queue a message is meant for, as far as its options say (before routing)."""
    queue = options.get("queue")
    if queue is not None:
        return queue if isinstance(queue, str) else str(getattr(queue, "name", queue))
    routing_key = options.get("routing_key")
    return str(routing_key) if routing_key else str(app.conf.task_default_queue)


def _transport(producer: Any) -> str | None:
    """The kombu transport's driver type (`amqp`, `redis`...), without connecting."""
    connection = getattr(producer, "connection", None)
    transport = getattr(connection, "transport", None)
    driver = getattr(transport, "driver_type", None)
    return driver if isinstance(driver, str) else None


@dataclass(slots=True)
class _EntryPlan:
    """What the publisher worked out once for one compiled entry."""

    entry: Entry  # the compiled entry this plan is for: a recompiled one gets a new plan
    task: Task | None  # the registered task it was worked out for
    direct: bool
    # Whether its message can be built once and filled in per window (MessageTemplate).
    templated: bool = False
    template: MessageTemplate | None = None
    # Its arguments' reprs, as as_task_v2 would compute them for every message; None until
    # the first direct send, and always for lazy arguments (they change per window).
    reprs: tuple[str, str] | None = None


class Publisher:
    """Publishes windows for one scheduler, remembering which queues its connection declared."""

    #: Most entries whose plan (and message template) is kept, the most recently sent: a
    #: plan saves work only for an entry sent again while it is kept, and a large schedule's
    #: entries are mostly sent far apart (100,000 plans held about 20 MiB).
    plan_cache_size = 10_000

    def __init__(self, app: Any, *, direct: bool = True) -> None:
        self.app = app
        self.direct = direct
        self._declarations = QueueDeclarations()
        self._plans: OrderedDict[str, _EntryPlan] = OrderedDict()
        self._shapes: dict[Hashable, MessageShape | None] = {}
        # Whether the app lets any entry's message be templated (protocol 2, no sent
        # events, static routes): worked out with the first entry.
        self._templates: bool | None = None
        conf = app.conf
        self._app_direct = type(app).send_task is Celery.send_task and not bool(
            conf.task_always_eager
        )
        self._sent_event = bool(conf.task_send_sent_event)
        self._repr_levels = _repr_levels(conf)
        # The sender's node name, which as_task_v2 would compute for every message (per pid).
        # The last window formatted: a burst's claims mostly share one.

    def send(
        self,
        producer: Any,
        entry: Entry,
        claim: Claim,
        *,
        retry_policy: Mapping[str, Any] | None = None,
    ) -> None:
        """Publish one window. `retry_policy` bounds kombu's reconnect-and-retry.

        The publish hooks that would act (`safebeat.hooks.around_publish`: Sentry's
        check-in, OpenTelemetry's producer span...) are entered around it, and may add to
        its headers; with none, the message goes out by the shortest path.
        """
        around = hooks.publishing()
        task = self.app.tasks.get(entry.task)
        plan = self._plan(entry, task)
        template = self._template(plan, claim, retry_policy)
        if template is not None and retry_policy is not None and not around:
            self._send_templated(producer, plan, template, claim, retry_policy=retry_policy)
            return
        arguments = message_for(entry, claim)
        options = arguments[2]
        if retry_policy is not None:
            options["retry"] = True
            options["retry_policy"] = dict(retry_policy)
        if not around:
            self._send(producer, plan, arguments)
            return
        headers = options["headers"]
        publish = hooks.Publish(
            entry,
            claim,
            headers,
            destination=_destination(options, self.app),
            transport=_transport(producer),
        )
        with hooks.around(around, publish):
            if template is not None and retry_policy is not None:
                self._send_templated(
                    producer, plan, template, claim, retry_policy=retry_policy, headers=headers
                )
            else:
                self._send(producer, plan, arguments)

    def _send(self, producer: Any, plan: _EntryPlan, arguments: Arguments) -> None:
        args, kwargs, options = arguments
        task = plan.task
        if self.direct and plan.direct:
            self._send_direct(producer, plan, arguments)
        elif task is not None:
            task.apply_async(args, kwargs, producer=producer, **options)
        else:
            self.app.send_task(plan.entry.task, args, kwargs, producer=producer, **options)

    def _plan(self, entry: Entry, task: Task | None) -> _EntryPlan:
        plans = self._plans
        plan = plans.get(entry.name)
        if plan is not None and plan.entry is entry and plan.task is task:
            plans.move_to_end(entry.name)
            return plan
        direct = self._can_go_direct(task, entry.options)
        plan = _EntryPlan(entry, task, direct, templated=direct and self._can_template(entry))
        plans[entry.name] = plan
        plans.move_to_end(entry.name)
        while len(plans) > self.plan_cache_size:
            plans.popitem(last=False)
        return plan

    def _can_go_direct(self, task: Task | None, options: Mapping[str, Any]) -> bool:
        return (
            options.keys() <= DIRECT_OPTIONS
            and self._app_direct
            and (task is None or task_goes_direct(task))
        )

    def _can_template(self, entry: Entry) -> bool:
        """Whether every window of a direct entry sends the same message but for the fields
        a `MessageTemplate` fills in (protocol 2, static routes, no lazy arguments...)."""
        headers = entry.options.get("headers") or {}
        if self._templates is None:
            self._templates = (
                self.direct
                and int(self.app.conf.task_protocol) == 2
                and not self._sent_event
                and all(isinstance(route, MapRoute) for route in self.app.amqp.router.routes)
            )
        return (
            self._templates
            and not has_lazy_arguments(entry)
            and not PER_WINDOW_HEADERS & headers.keys()
        )

    def _template(
        self, plan: _EntryPlan, claim: Claim, retry_policy: Mapping[str, Any] | None
    ) -> MessageTemplate | None:
        """The entry's message template, built from this window if it has none yet; None
        where Celery has to build this message (signal receivers, no retry policy...)."""
        if (
            not plan.templated
            or retry_policy is None  # then routes and entry options may set the retry
            or publish_receivers()
            or _publishing_a_callback()
        ):
            return None
        if plan.template is None:
            shape = self._shape(plan, claim, retry_policy)
            if shape is None:
                plan.templated = False
                return None
            entry, task = plan.entry, plan.task
            args, kwargs = list(entry.args), dict(entry.kwargs)
            if task is not None and task.typing:
                task.__header__(*args, **kwargs)  # TypeError on a bad signature, as apply_async
            plan.template = shape.template(
                args,
                kwargs,
                reprs=self._reprs(plan, args, kwargs),
                window_headers=headers_for(entry, ""),
            )
        return plan.template

    def prewarm(self, entry: Entry) -> None:
        """Build `entry`'s message template now, ahead of its window, so that the burst it
        is due in only fills it in. Does nothing where a send would not template the entry
        or Celery would build its message (publish receivers), or for a task with its own
        expiry (its first message is built from a real window, as before)."""
        if publish_receivers() or _publishing_a_callback():
            return
        task = self.app.tasks.get(entry.task)
        if task is not None and getattr(task, "expires", None) is not None:
            return
        plan = self._plan(entry, task)
        if plan.templated and plan.template is None:
            # The shape's task id and window are the stand-in's; each window fills in its own.
            stand_in = Claim(0, entry.name, _PREWARM_WINDOW, _PREWARM_TASK_ID, 0)
            self._template(plan, stand_in, {})

    def _shape(
        self, plan: _EntryPlan, claim: Claim, retry_policy: Mapping[str, Any]
    ) -> MessageShape | None:
        """The message shape of the entry's task and options: shared by the entries whose
        options are plain values, worked out from this entry's window for the first."""
        entry = plan.entry
        options = [(key, value) for key, value in entry.options.items() if key != "headers"]
        key: Hashable | None = None
        if all(isinstance(value, str | int | float | bool | None) for _, value in options):
            key = (entry.task, plan.task, tuple(sorted(options)))
            if key in self._shapes:
                return self._shapes[key]
        arguments = message_for(entry, claim)
        arguments[2].update(retry=True, retry_policy=dict(retry_policy))
        routed, message, expires = self._direct_message(plan, arguments)
        shape = MessageShape.capture(self.app, entry.task, message, routed, expires=expires)
        if key is not None:
            self._shapes[key] = shape
        return shape

    def _send_templated(
        self,
        producer: Any,
        plan: _EntryPlan,
        template: MessageTemplate,
        claim: Claim,
        *,
        retry_policy: Mapping[str, Any],
        headers: Mapping[str, Any] | None = None,
    ) -> None:
        """Publish one window of a templated entry through kombu's producer; `headers` are
        the window's (`message_for`'s), where something added to them (trace context,
        Sentry's check-in)."""
        app, task_id, shape = self.app, claim.task_id, template.shape
        expiration = None
        if shape.expires is not None:
            expiration = seconds_left(task_id, shape.expires, now=app.now)
        if headers is None:
            options = template.fill_window(
                task_id,
                window_text(claim.window),
                reply_to=app.thread_oid,
                now=app.now,
                timezone=app.timezone,
                expiration=expiration,
                retry_policy=retry_policy,
            )
        else:
            options = template.fill(
                task_id,
                headers=headers,
                reply_to=app.thread_oid,
                now=app.now,
                timezone=app.timezone,
                expiration=expiration,
                retry_policy=retry_policy,
            )
        queue = shape.queue
        if queue is not None and self._declarations.declared(producer, queue):
            options["declare"] = []
        with producer.connection._reraise_as_library_errors():
            producer.publish(template.body, **options)
        if queue is not None:
            self._declarations.add(queue)

    def _direct_message(
        self, plan: _EntryPlan, arguments: Arguments
    ) -> tuple[dict[str, Any], Any, float | str | datetime | None]:
        """What `apply_async` -> `send_task` do before they publish a message with no eta
        or links: (routed options, message, the task's own expires)."""
        args, kwargs, options = arguments
        app, amqp, name, task = self.app, self.app.amqp, plan.entry.task, plan.task
        if task is not None:
            if task.typing:
                task.__header__(*args, **kwargs)  # TypeError on a bad signature, as apply_async
            options = dict(task._get_exec_options(), **options)
            options.setdefault("ignore_result", task.ignore_result)
        task_id = options.pop("task_id")
        time_limit = options.pop("time_limit", None)
        soft_time_limit = options.pop("soft_time_limit", None)
        ignore_result = options.pop("ignore_result", _UNSET_IGNORE_RESULT)
        # Only the task's own expires can be here (an entry's takes the full path).
        expires = options.pop("expires", None)
        options = amqp.router.route(options, name, args, kwargs, task)
        if expires is not None:
            options["expiration"] = seconds_left(task_id, expires, now=app.now)
        argsrepr, kwargsrepr = self._reprs(plan, args, kwargs)
        message = amqp.create_task_message(
            task_id,
            name,
            args,
            kwargs,
            origin=origin_name(),
            argsrepr=argsrepr,
            kwargsrepr=kwargsrepr,
            reply_to=app.thread_oid,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            create_sent_event=self._sent_event,
            ignore_result=ignore_result,
            expires=expires,
            **options,
        )
        return options, message, expires

    def _send_direct(self, producer: Any, plan: _EntryPlan, arguments: Arguments) -> None:
        """What `apply_async` -> `send_task` do for a message with no eta or links."""
        options, message, _ = self._direct_message(plan, arguments)
        queue = options.get("queue")
        queue_name = None
        if queue is not None and options.get("declare") is None:
            # kombu binds a copy of the queue before it looks in its declared cache, on every
            # message; the first message per queue and connection declares, the rest skip it.
            queue_name = queue if isinstance(queue, str) else queue.name
            if self._declarations.declared(producer, queue_name):
                options["declare"] = []
        with producer.connection._reraise_as_library_errors():
            self.app.amqp.send_task_message(producer, plan.entry.task, message, **options)
        if queue_name is not None:
            self._declarations.add(queue_name)

    def _reprs(self, plan: _EntryPlan, args: list[Any], kwargs: dict[str, Any]) -> tuple[str, str]:
        if plan.reprs is not None:
            return plan.reprs
        reprs = argument_reprs(self.app.amqp, args, kwargs, levels=self._repr_levels)
        if not has_lazy_arguments(plan.entry):
            plan.reprs = reprs
        return reprs

    def forget_declarations(self) -> None:
        """After a connection error: declare every queue again on the next message."""
        self._declarations.forget()
