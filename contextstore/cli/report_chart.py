"""The report's chart: context tokens per request against the window and the maximum
allowed size, with truncations, checkpoints, rollbacks and restores marked, as inline SVG.

pygal draws it (the ``report`` extra): it emits standalone SVG from Python with no
JavaScript needed, so the report stays one small self-contained file that opens offline.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextstore.cli.output import has_usage
from contextstore.core.audit_records import AuditReport, TimelineEvent

INSTALL_HINT = 'the report draws its chart with pygal: pip install "contextstore[report]"'

MARKED_EVENTS = ("truncation", "checkpoint", "rollback", "restore")
SERIES_COLORS = {
    "context tokens": "#1f5fbf",
    "context window": "#6b6b6b",
    "maximum allowed size": "#d9822b",
    "truncation": "#c0392b",
    "checkpoint": "#2e8b57",
    "rollback": "#7d3c98",
    "restore": "#16a0a0",
}


@dataclass(frozen=True)
class Marker:
    """An event placed between the requests it happened between."""

    event: str
    x: float
    label: str


def markers(request_ts: Sequence[int], events: Sequence[TimelineEvent]) -> list[Marker]:
    """Truncations, checkpoints, rollbacks and restores at x = (requests before it) + 0.5."""
    ordered = sorted(request_ts)
    placed: list[Marker] = []
    taken: dict[float, int] = {}
    for e in events:
        if e.event not in MARKED_EVENTS:
            continue
        x = bisect_right(ordered, e.ts) + 0.5
        # Events between the same two requests stand side by side, not on top of each other.
        nudge = taken.get(x, 0)
        taken[x] = nudge + 1
        placed.append(Marker(e.event, x - 0.06 * nudge, f"{e.event}: {e.detail}"))
    return placed


def _pygal() -> Any:
    try:
        import pygal
    except ImportError:
        return None
    return pygal


def available() -> bool:
    """True when pygal is installed."""
    return _pygal() is not None


def render_svg(report: AuditReport, events: Sequence[TimelineEvent]) -> str:
    """The chart as an SVG document (text); raises ImportError without pygal."""
    pygal = _pygal()
    if pygal is None:
        raise ImportError(INSTALL_HINT)
    from pygal.style import Style

    requests = report.requests
    count = len(requests)
    windows = [(r.context_window, r.max_allowed_size) for r in requests] or [
        (report.context_window, report.max_allowed_size)
    ]
    # A request over its window (an imported total with cache reads, a provider that let it
    # through) stays inside the plot: the axis reaches the highest point as well as the window.
    top = float(max([w for w, _ in windows] + [r.total_tokens for r in requests if has_usage(r)]))
    placed = markers([r.ts for r in requests], events)
    names = ["context tokens", "context window", "maximum allowed size"]
    names += [e for e in MARKED_EVENTS if any(m.event == e for m in placed)]
    style = Style(
        background="white",
        plot_background="white",
        colors=tuple(SERIES_COLORS[n] for n in names),
        font_family="system-ui, sans-serif",
        label_font_size=11,
        major_label_font_size=11,
        legend_font_size=12,
        title_font_size=15,
    )
    chart = pygal.XY(
        js=[],
        style=style,
        width=960,
        height=440,
        allow_interruptions=True,
        legend_at_bottom=False,
        truncate_legend=-1,
        show_x_guides=False,
        x_title="requests, in order",
        y_title="tokens",
        range=(0, top * 1.05),
        xrange=(0.5, max(count, 1) + 0.5),
        dots_size=3.5,
        no_data_text="no requests recorded",
        title=f"context tokens per request (window {report.context_window:,}, "
        f"maximum allowed size {report.max_allowed_size:,.0f}"
        + (", now; each request against its own" if len(set(windows)) > 1 else "")
        + ")"
        + ("" if count else ": no requests recorded yet"),
        show_x_labels=count > 0,
        x_labels=list(range(1, count + 1)) if count <= 40 else None,
    )
    # A prepared request whose usage was never recorded has no point (a gap), not zero.
    chart.add(
        "context tokens",
        [
            {"value": (i + 1, r.total_tokens), "label": f"request {r.request_id}"}
            if has_usage(r)
            else None
            for i, r in enumerate(requests)
        ],
    )
    chart.add(
        "context window",
        steps([w for w, _ in windows]),
        show_dots=False,
        stroke_style={"width": 2, "dasharray": "8,4"},
    )
    chart.add(
        "maximum allowed size",
        steps([m for _, m in windows]),
        show_dots=False,
        stroke_style={"width": 2, "dasharray": "3,3"},
    )
    for name in names[3:]:
        values: list[Any] = []
        for m in placed:
            if m.event == name:
                values += [(m.x, 0), {"value": (m.x, top), "label": m.label}, None]
        chart.add(name, values, show_dots=False, stroke_style={"width": 2})
    svg: str = chart.render(is_unicode=True)
    svg = svg.split("?>", 1)[1] if svg.startswith("<?xml") else svg
    # pygal writes its configuration in a script even with js=[]; only its scripts read it.
    return _SCRIPT.sub("", svg)


def steps(values: Sequence[float]) -> list[tuple[float, float]]:
    """A line at ``values[i]`` across request ``i + 1``'s slot (x from ``i + 0.5`` to
    ``i + 1.5``), rising or falling where the value changes (a model switch changes the
    window requests are sent with); two points when it never changes."""
    points = [(0.5, float(values[0]))]
    for i in range(1, len(values)):
        if values[i] != values[i - 1]:
            points += [(i + 0.5, float(values[i - 1])), (i + 0.5, float(values[i]))]
    points.append((len(values) + 0.5, float(values[-1])))
    return points


_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>", re.DOTALL)
