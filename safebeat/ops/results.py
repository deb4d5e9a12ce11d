"""What an operator action says it did (`Result`), a line each (`Said`), in the surface's
language (`Words`): English on the CLI and the console, the request's in the Django admin.
`safebeat.ops.actions` builds them; its names for them stay importable from there."""

from __future__ import annotations

import enum
import gettext
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class Level(enum.Enum):
    """How a line of a result reads: done, worth a look, or failed."""

    OK = "ok"
    WARNING = "warning"
    ERROR = "error"


class Words(Protocol):
    """A translation: `gettext.NullTranslations` (English), or Django's in the admin."""

    def gettext(self, message: str, /) -> str: ...

    def ngettext(self, singular: str, plural: str, n: int, /) -> str: ...


#: The texts as written: what the CLI and the console show.
ENGLISH: Words = gettext.NullTranslations()


@dataclass(frozen=True)
class Said:
    """One line of a result: a message id (with its plural and count, if it has one) and
    its arguments, rendered by `render` in the surface's language."""

    level: Level
    text: str
    args: Mapping[str, object] = field(default_factory=dict)
    plural: str | None = None
    count: int = 1

    def render(self, words: Words = ENGLISH) -> str:
        if self.plural is None:
            return words.gettext(self.text) % self.args
        return words.ngettext(self.text, self.plural, self.count) % self.args


@dataclass(frozen=True)
class Result:
    """What an action did: `subject` (`backfilled 'report'`), `summary` (the whole of it)
    and `lines` (the windows worth naming, each at its level)."""

    subject: Said
    summary: Said
    lines: Sequence[Said] = ()

    @property
    def failed(self) -> bool:
        """Whether a window could not be sent (the CLI exits 1)."""
        return any(line.level is Level.ERROR for line in self.lines)

    def headline(self, words: Words = ENGLISH) -> str:
        """`triggered 'report': window 2026-03-01T06:00:00.5Z sent (task id ...)`."""
        return self.line(self.summary, words)

    def line(self, said: Said, words: Words = ENGLISH) -> str:
        """One line of the result, after its subject."""
        return f"{self.subject.render(words)}: {said.render(words)}"

    def said(self, words: Words = ENGLISH) -> list[tuple[Level, str]]:
        """Every line, the summary first, each after the subject."""
        summary = (self.summary.level, self.headline(words))
        return [summary, *((said.level, self.line(said, words)) for said in self.lines)]
