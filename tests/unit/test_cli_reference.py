"""docs/cli.md is the `--help` of every command; run this file to rewrite it after a change."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from safebeat.cli import main

DOCS = Path(__file__).parents[2] / "docs" / "cli.md"
COMMANDS = [
    "status",
    "history",
    "health",
    "doctor",
    "pause",
    "resume",
    "trigger",
    "backfill",
    "skip-next",
    "audit",
    "schedule",
    "migrate",
    "plan",
    "prune",
    "exec",
    "web",
    "exporter",
]
#: The commands of command groups, each with its own section after its group's.
SUBCOMMANDS = {"schedule": ["add", "list", "remove"]}
INTRO = """# Command line

The `safebeat` command (also `python -m safebeat`) reads the same settings as beat.
`-A proj` loads the Celery app's `safebeat_*` settings (and, for `status`, `doctor`,
`trigger` and `backfill`, the schedule its beat runs: the app's `beat_schedule` and, for
`safebeat.contrib.django.DatabaseScheduler`, django-celery-beat's enabled rows, a row
winning over a setting of its name). A `beat_scheduler` setting that names a scheduler
decides whether the rows are read: that one or a subclass of it, yes; any other (such as
`"safebeat.Scheduler"`), no. Left at Celery's default, since beat's `-S` is not visible
here, the rows are read when the app's Django project has `django_celery_beat` installed;
if its tables cannot be read (not migrated, say), the command stops with one line saying
so: run `python manage.py migrate django_celery_beat`, or set `beat_scheduler` to the
scheduler beat runs. `--url` names the store directly, and
`SAFEBEAT_*` environment variables apply as they do for beat. `-A`, `--url` and
`--namespace` may come before or after the command. Every command prints tables or lines
for people; `status`, `history`, `doctor` and `plan` also take `--json`, for scripts.

An error is one line: exit status 2 for a command given wrongly (an `-A` that names no
module or app, `trigger` without `-A`), 1 for anything else. `-A` is looked up as
`celery -A` does, from the current directory, and the error names that directory. An
unexpected failure is one line too, naming its type; `--traceback` (or
`SAFEBEAT_DEBUG=1`) shows where it happened. Store URLs never show a password.

With no `-A`, `--url` or `SAFEBEAT_URL`, a command stops with "no store configured: give
-A, --url or SAFEBEAT_URL". Only `migrate` and `exec` may create a store: the others
report a SQLite file that does not exist, and create nothing. Without `-A` or a namespace
setting, a store holding one namespace gives it (the command says so on stderr); one
holding several lists them and asks for `--namespace`, and a namespace with no entries
says which namespaces the store holds.

`status` marks each replica `live` or `dead`: dead once it missed three heartbeats (beat
heartbeats every 10 s; the Django admin uses the same rule). A replica that stopped
cleanly (SIGTERM) removed its heartbeat and is not listed. With `-A`, entries beat
cannot run are listed under "broken entries", as beat logs them; `doctor` reports them
as problems.

`pause` and `resume` act on the whole cluster at the next tick of any replica: a paused
entry's windows are recorded as skipped with reason `paused`, and resuming never sends
the windows that passed meanwhile. `pause --until 2026-03-01T09:00:00Z` ends the pause by
itself at that instant: the windows before it are skipped, the ones from it on are sent,
by every replica and with no `resume`; `status` shows `paused until ... (note)`.
`trigger` and `backfill` claim their windows under the same unique key as beat, then
publish them from this process with the app given by `-A`: a window already sent is never
sent again, and every extra run is recorded with reason `trigger` or `backfill`. A paused
entry can still be triggered: that is an explicit run. `trigger` and `backfill` find the
entry in the schedule beat runs, django-celery-beat rows included.

`skip-next` records the entry's next window (the one `status` shows; a holiday, say) as
skipped with reason `operator`, under the same unique key: beat's claim of that window
meets the row and leaves it, so it is not sent, and the windows after it are sent as
usual. Run it again to skip the window after. It needs `-A` to compute the window, and
refuses a paused entry (its windows are skipped anyway) and one with no window left (a
`once` entry that ran).

Every `pause`, `resume`, `trigger`, `backfill`, `skip-next`, `prune` and `migrate` that
changes the schema, from this command, the Django admin or the web console, is recorded in the
store's audit trail: who (here
the OS user at the host, `alice@ops-1`; there the signed-in user), when (the store's
clock), what, the entry and its windows (the windows claimed; a pause's end), and the
`--note`. `audit` lists it, newest first; it is pruned with the history
(`safebeat_retention`).

```
$ safebeat -A proj audit --entry nightly-report
when                  who          action    entry           windows               note
--------------------  -----------  --------  --------------  --------------------  ----------
2026-03-01T09:14:03Z  alice@ops-1  resume    nightly-report  -                     -
2026-03-01T08:02:41Z  admin        backfill  nightly-report  2026-03-01T02:00:00Z  -
2026-03-01T07:55:10Z  alice@ops-1  pause     nightly-report  2026-03-01T09:00:00Z  db upgrade
```

`plan` is for a deploy's CI: given the new code's app (`-A`), it lists the entries the
store would see added, removed (registered, but defined by no code: orphans, except
entries of `safebeat exec` and APScheduler, which no app defines), changed (with the next
three windows before and after, computed as beat computes them) and broken (beat would
skip them), and exits 1 if there is any, 0 if none. A store beat has not created yet
means every entry is added. Run it where beat's store is reachable:

```
$ safebeat -A proj plan
store postgresql://beat:***@db/app, namespace 'proj'

added:
  + invoice-reminders: crontab 0 9 * * 1-5 in Europe/Berlin
      next windows after:  2026-03-02T08:00:00Z, 2026-03-03T08:00:00Z, 2026-03-04T08:00:00Z

removed (registered, defined by no code; `prune --orphans` forgets them):
  - legacy-sync: every 600s
      next windows before: 2026-03-01T16:10:12Z, 2026-03-01T16:20:12Z, 2026-03-01T16:30:12Z

changed:
  ~ nightly-report: crontab 0 3 * * * in Europe/Berlin -> crontab 30 4 * * * in Europe/Berlin
      next windows before: 2026-03-02T02:00:00Z, 2026-03-03T02:00:00Z, 2026-03-04T02:00:00Z
      next windows after:  2026-03-02T03:30:00Z, 2026-03-03T03:30:00Z, 2026-03-04T03:30:00Z
  ~ sync-prices: every 60s (arguments, options or policy changed)

4 entries would change
```

`prune --orphans` then forgets the removed ones: their state goes (so `status` no longer
lists them), their dispatch history stays until it ages out. An entry that a live
replica still runs (its heartbeat lists it: a rolling deploy not finished) is kept and
named, since that replica would register it again; prune again when the deploy is done.
Entries added at run time (`safebeat schedule add`, `safebeat.schedules.add`) are defined
in the store, not in code: `plan`, `prune --orphans`, `status`, `trigger` and `backfill`
count them as defined, beside the app's (see [Entries added at run time](schedules.md)).

`schedule add` needs `-A`: it refuses a name the app's `beat_schedule` (or a
django-celery-beat row) defines and checks the entry as beat will compile it, so a bad
crontab or time zone is an error here, not in beat's log. Exactly one of `--every`,
`--crontab` and `--at` gives the schedule; `--replace` changes an entry added before.

`exec` runs a command, not a task: it is what a cron line or a Kubernetes CronJob
starts, and it runs the command only where the window's claim is new. Its exit status is
the command's (see [Protect cron and Kubernetes CronJob](cron.md) for the others).

The same commands run inside Celery's own command line, beside `celery inspect`:
`celery -A proj safebeat status` is `safebeat -A proj status`. There `-A`, `-b`/`--broker`,
`--workdir` and celery's other global options come before `safebeat`, as for every celery
command, and celery applies them: `trigger` and `backfill` publish to the broker `-b`
names. `--url`, `--namespace` and `--traceback` come after `safebeat`; an `-A` after the
command naming another app than celery's is refused. Without celery's `-A`, a command
takes no schedule from celery's default app, as `safebeat` without `-A`. Celery finds
the group through the `celery.commands` entry point of the installed package, so
`celery --help` lists it.

`web` serves the [web console](web.md) (it needs `pip install "safebeat[web]"`). It
refuses an address other than loopback unless `--token` or `--user` and `--password`
are given.

`doctor` says first where the store URL came from (`--url`, the `SAFEBEAT_URL` variable,
the app's `safebeat_url` setting, or the default), and warns when `SAFEBEAT_URL` and the
app's `safebeat_url` are both set and differ: the variable wins, silently, everywhere.
With `-A` it checks the app's `beat_scheduler` setting: a name that cannot be loaded is
a problem naming the closest known one (`beat_scheduler 'safebeat.Schedular' cannot be
loaded (...); did you mean 'safebeat.Scheduler'?`), and a scheduler that is not
safebeat's is a warning; for django-celery-beat's `DatabaseScheduler` it names
`safebeat.contrib.django.DatabaseScheduler`, which runs the same rows. Beat's `-S` wins
over that setting and cannot be seen from here. A store that refuses the URL's user
name, password or database is a problem that says which to check (`check the user name
and password in the store URL`), as beat's log does. A `safebeat_lock_timeout` above
half of `safebeat_execution_lease` is a warning naming both: a worker's lease renewal
blocked on a row lock would be retried too late to keep a live run's lease.

This page is the output of `--help`; a test keeps the two identical.
"""


def help_text(*command: str) -> str:
    result = CliRunner().invoke(
        main, [*command, "--help"], prog_name="safebeat", terminal_width=100
    )
    assert result.exit_code == 0, result.output
    return result.output


def reference() -> str:
    sections = [f"## safebeat\n\n```\n{help_text()}```\n"]
    for name in COMMANDS:
        sections.append(f"## safebeat {name}\n\n```\n{help_text(name)}```\n")
        sections += [
            f"## safebeat {name} {sub}\n\n```\n{help_text(name, sub)}```\n"
            for sub in SUBCOMMANDS.get(name, [])
        ]
    return "\n".join([INTRO, *sections])


def test_every_command_is_documented() -> None:
    """Every command of the CLI has a section in docs/cli.md, and loads under its name."""
    ctx = click.Context(main)
    listed = main.list_commands(ctx)
    assert set(listed) == set(COMMANDS), "add new commands to COMMANDS"
    for name in listed:
        command = main.get_command(ctx, name)
        assert command is not None
        assert command.name == name


def test_docs_show_the_current_help_of_every_command() -> None:
    """docs/cli.md matches `--help`; regenerate with `python tests/unit/test_cli_reference.py`."""
    assert DOCS.read_text(encoding="utf-8") == reference()


if __name__ == "__main__":
    DOCS.write_text(reference(), encoding="utf-8")
