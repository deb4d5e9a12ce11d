"""The words of the operator's actions (`safebeat.ops.actions`), listed for `makemessages`.

The table of actions is Django-free, so its texts are not in a gettext call that
`makemessages` finds in this app; each is named here once, for the catalogs in `locale/`.
The admin translates them when it shows an action's label or result.
`tests/unit/test_action_words.py` fails while a text of the table is missing here.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop, ngettext_lazy

WORDS = (
    # The entries page's action menu.
    gettext_noop("Pause selected entries"),
    gettext_noop("Resume selected entries"),
    gettext_noop("Trigger selected entries now"),
    gettext_noop("Backfill the selected entry..."),
    gettext_noop("Skip the next window of selected entries"),
    # The fields' labels.
    gettext_noop("Paused until"),
    gettext_noop("Note"),
    gettext_noop("From"),
    gettext_noop("To"),
    # Refused.
    gettext_noop("could not pause %(name)r: %(error)s"),
    gettext_noop("could not resume %(name)r: %(error)s"),
    gettext_noop("could not trigger %(name)r: %(error)s"),
    gettext_noop("could not backfill %(name)r: %(error)s"),
    gettext_noop("could not skip the next window of %(name)r: %(error)s"),
    # Pause and resume.
    gettext_noop("paused %(name)r (namespace %(namespace)r)"),
    gettext_noop("every replica skips its windows (reason paused) until it is resumed"),
    gettext_noop(
        "paused %(name)r (namespace %(namespace)r) until %(until)s, then resumes by itself"
    ),
    gettext_noop("every replica skips its windows before then (reason paused)"),
    gettext_noop("resumed %(name)r (namespace %(namespace)r)"),
    gettext_noop("its next window is sent; windows that passed while it was paused are not"),
    # Trigger and backfill: what they published.
    gettext_noop("triggered %(name)r"),
    gettext_noop("backfilled %(name)r"),
    gettext_noop("window %(window)s sent (task id %(task_id)s)"),
    ngettext_lazy(
        "%(count)d window sent, %(first)s to %(last)s",
        "%(count)d windows sent, %(first)s to %(last)s",
        "count",
    ),
    gettext_noop("nothing sent"),
    gettext_noop(
        "window %(window)s claimed, but the broker is unreachable: a beat replica sends it "
        "after safebeat_claim_timeout"
    ),
    gettext_noop("window %(window)s could not be sent: %(error)s"),
    ngettext_lazy(
        "%(count)d window already had a row; left alone",
        "%(count)d windows already had a row; left alone",
        "count",
    ),
    # Skip-next.
    gettext_noop("skipped the next window of %(name)r"),
    gettext_noop("window %(window)s is recorded as skipped (reason operator)"),
)
