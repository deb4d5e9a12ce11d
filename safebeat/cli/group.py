"""The `safebeat` commands, by name and module: one table for `safebeat` and `celery safebeat`.

A command's module is imported when the command runs or `--help` lists it, so `celery`
(which loads `safebeat.celery_command` whenever it starts, for a worker too) and a
health check running `safebeat health` import only what they use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

import click

from safebeat.cli.errors import invoke_with_one_line_errors

F = TypeVar("F", bound=Callable[..., Any])

#: Each command's name, and the module (in safebeat.cli) and function that define it. The
#: operator's actions on an entry (pause, resume, trigger, backfill, ...) are not listed:
#: each is a command of `safebeat.cli.operate`, made from `safebeat.ops.actions.ACTIONS`.
COMMANDS = {
    "audit": ("history", "audit"),
    "doctor": ("upkeep", "doctor_command"),
    "exec": ("exec_command", "exec_command"),
    "exporter": ("exporter", "exporter"),
    "health": ("status", "health"),
    "history": ("history", "history"),
    "migrate": ("upkeep", "migrate"),
    "plan": ("plan", "plan_command"),
    "prune": ("upkeep", "prune"),
    "schedule": ("schedule", "schedule"),
    "status": ("status", "status"),
    "web": ("web", "web"),
}


class Commands(click.Group):
    """The commands of COMMANDS, loaded on first use; every error is one line, unless
    --traceback asks for the trace."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return command_names()

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return _actions().get(cmd_name)
        module, name = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f"safebeat.cli.{module}"), name)
        if not isinstance(command, click.Command):
            raise TypeError(f"safebeat.cli.{module}.{name} is not a click command")
        return command

    def invoke(self, ctx: click.Context) -> Any:
        return invoke_with_one_line_errors(ctx, lambda: super(Commands, self).invoke(ctx))


def command_names() -> list[str]:
    """Every command's name: COMMANDS' and the operator's actions'."""
    return sorted({*COMMANDS, *_actions()})


def _actions() -> dict[str, click.Command]:
    """The commands of the operator's actions (imported on first use: they publish)."""
    return dict(importlib.import_module("safebeat.cli.operate").COMMANDS)


def global_options(group: F) -> F:
    """The options of `safebeat` that `celery safebeat` takes too (celery has its own -A)."""
    for option in reversed(
        [
            click.option(
                "--url", help="Store URL; overrides safebeat_url and $SAFEBEAT_URL.", metavar="URL"
            ),
            click.option(
                "--namespace", help="Namespace; overrides safebeat_namespace.", metavar="NAME"
            ),
            click.option(
                "--traceback",
                is_flag=True,
                help="Show the traceback of an unexpected error (also SAFEBEAT_DEBUG=1).",
            ),
        ]
    ):
        group = option(group)
    return group
