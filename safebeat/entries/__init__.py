"""Schedule entries: a `beat_schedule` item, validated and compiled into a window rule.

Celery's own schedule objects are the input (`schedule`, `crontab`, `solar`, or a number
of seconds / a timedelta); safebeat reads their parsed fields and never parses cron
text itself. A malformed entry raises `EntryError` naming it, and only that entry is
left out.

The package is split by job: `entry` (the compiled `Entry`), `compiling` (an item into an
entry), `options` (its `options['safebeat']`), `rules` (Celery's schedules into window
rules), `text` (a rule's canonical text) and `digest`.
"""

from safebeat.entries.compiling import (
    ENTRY_KEYS,
    RESERVED_OPTIONS,
    compile_entry,
    compile_schedule,
)
from safebeat.entries.entry import Entry, undecided_after
from safebeat.entries.options import MAX_JITTER, POLICY_KEYS
from safebeat.entries.text import crontab_fields, describe, zone_name, zone_of

__all__ = [
    "ENTRY_KEYS",
    "MAX_JITTER",
    "POLICY_KEYS",
    "RESERVED_OPTIONS",
    "Entry",
    "compile_entry",
    "compile_schedule",
    "crontab_fields",
    "describe",
    "undecided_after",
    "zone_name",
    "zone_of",
]
