"""An entry's recent windows as pictures: a strip of coloured cells and a lag chart, in SVG.

Drawn on the server from history rows (newest first, as the store returns them); every
text in them is escaped, every colour comes from the console's stylesheet by class.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from html import escape

from safebeat.display import lag, note, span, when
from safebeat.stores.protocols import DispatchRecord
from safebeat.web.console import window_kind

#: The legend of the strip, in the order it is shown.
KINDS = ("on-time", "late", "skipped", "failed", "never-ran")
_CELL = 14
_GAP = 2
_CHART_HEIGHT = 80
_CHART_WIDTH = 560
_AXIS_HEIGHT = 18  # room under the chart for the windows' times


def window_strip(rows: Sequence[DispatchRecord]) -> str:
    """One cell per window, oldest on the left, classed by how it went, titled with details."""
    hooked = any(r.started_at is not None for r in rows)
    cells = []
    for index, record in enumerate(reversed(rows)):
        kind = window_kind(record, hooked)
        title = f"{when(record.window)}: {kind.replace('-', ' ')}"
        detail = note(record)
        if detail:
            title += f" ({detail})"
        cells.append(
            f'<rect class="w-{kind}" x="{index * (_CELL + _GAP)}" y="0" width="{_CELL}" '
            f'height="{_CELL}" rx="2"><title>{escape(title)}</title></rect>'
        )
    width = max(len(rows) * (_CELL + _GAP) - _GAP, _CELL)
    return (
        f'<svg class="strip" role="img" aria-label="recent windows, oldest first" '
        f'width="{width}" height="{_CELL}" viewBox="0 0 {width} {_CELL}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(cells)}</svg>'
    )


def lag_chart(rows: Sequence[DispatchRecord]) -> str:
    """Lag (window to publish) of each sent window, oldest on the left, as a line with dots,
    with the lag on the right-hand axis and the windows' times (UTC) under the line."""
    points = [(r, lag(r)) for r in reversed(rows)]
    sent = [(r, d.total_seconds()) for r, d in points if d is not None]
    if not sent:
        return '<p class="muted">No window of these was sent yet: no lag to draw.</p>'
    top = max(1.0, *(seconds for _, seconds in sent))
    step = _CHART_WIDTH / max(len(sent) - 1, 1)
    coordinates = [
        (round(i * step, 1), round(_CHART_HEIGHT - seconds / top * (_CHART_HEIGHT - 4) - 2, 1))
        for i, (_, seconds) in enumerate(sent)
    ]
    line = " ".join(f"{x},{y}" for x, y in coordinates)
    dots = "".join(
        f'<circle cx="{x}" cy="{y}" r="3"><title>{escape(when(r.window))}: lag '
        f"{escape(span(lag(r)))}</title></circle>"
        for (x, y), (r, _) in zip(coordinates, sent, strict=True)
    )
    return (
        f'<svg class="lag" role="img" aria-label="lag of each sent window, oldest first" '
        f'width="{_CHART_WIDTH + 70}" height="{_CHART_HEIGHT + _AXIS_HEIGHT}" '
        f'viewBox="-2 -2 {_CHART_WIDTH + 70} {_CHART_HEIGHT + _AXIS_HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg">'
        f'<line class="axis" x1="0" y1="{_CHART_HEIGHT}" x2="{_CHART_WIDTH}" '
        f'y2="{_CHART_HEIGHT}"/>'
        f'<text x="{_CHART_WIDTH + 6}" y="10">{escape(span_seconds(top))} lag</text>'
        f'<text x="{_CHART_WIDTH + 6}" y="{_CHART_HEIGHT}">0s</text>'
        f"{time_axis([r.window for r, _ in sent], [x for x, _ in coordinates])}"
        f'<polyline points="{line}"/>{dots}</svg>'
    )


def time_axis(windows: Sequence[datetime], xs: Sequence[float]) -> str:
    """Labels under the chart: the first, middle and last window's time in UTC, with the
    date where the windows span more than one day; one label for one window."""
    span_days = windows[-1].date() != windows[0].date()
    shape = "%m-%d %H:%M" if span_days else "%H:%M:%S"
    picked = sorted({0, len(windows) // 2, len(windows) - 1})
    y = _CHART_HEIGHT + _AXIS_HEIGHT - 6
    labels = []
    for index in picked:
        text = windows[index].astimezone(timezone.utc).strftime(shape)
        anchor = "start" if index == 0 else "end" if index == len(windows) - 1 else "middle"
        x = xs[index]
        tick = (
            f'<line class="axis" x1="{x}" y1="{_CHART_HEIGHT}" x2="{x}" y2="{_CHART_HEIGHT + 3}"/>'
        )
        labels.append(
            f'{tick}<text class="time" x="{x}" y="{y}" text-anchor="{anchor}">{escape(text)}</text>'
        )
    zone = f'<text x="{_CHART_WIDTH + 6}" y="{y}">UTC</text>'
    return "".join(labels) + zone


def span_seconds(seconds: float) -> str:
    return span(timedelta(seconds=seconds))
