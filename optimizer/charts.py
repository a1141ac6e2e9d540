"""Inline SVG charts, written by hand: no library, no script, nothing fetched.

Bar charts (grouped or stacked) and line charts with titles, gridlines, legends, axis labels and
values, for the self-contained HTML report. Every text goes through `esc`. Coordinates are
floats; the numbers shown come formatted from the caller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from rentopt.optimizer.text import escape_html as esc

# Okabe & Ito's colour-blind-safe palette (https://jfly.uni-koeln.de/color/), yellow left out
# because it vanishes on white, then a few neutral extras for more than seven series.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#8C8C8C",
           "#7F3C8D", "#11A579")
CHART_WIDTH = 880


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] in steps of 1, 2, 2.5 or 5 x 10^k.

    >>> nice_ticks(0, 7.3)
    [0.0, 2.0, 4.0, 6.0, 8.0]
    >>> nice_ticks(0.21, 0.29)
    [0.2, 0.22, 0.24, 0.26, 0.28, 0.3]
    """
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, count - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(float(i * step), 10) for i in range(first, last + 1)]


def _tick_text(v: float) -> str:
    """Tick labels: no float noise, no trailing zeros.

    >>> _tick_text(0.30000000000000004), _tick_text(2.0), _tick_text(1250.0)
    ('0.3', '2', '1,250')
    """
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{round(v, 6):.6f}".rstrip("0").rstrip(".")


@dataclass
class Bar:
    """One bar of a chart: its stacked segments, or a note where there is no bar."""

    label: str
    segments: list[tuple[float, str, str]]  # (value, colour, tooltip)
    value_text: str
    note: str = ""  # shown instead of a bar when there is none


def _legend(items: Sequence[tuple[str, str, bool]], x: float, y: float, width: float) -> tuple[list[str], float]:
    """Swatches with names, wrapping at `width`; returns the SVG and the y below the legend."""
    parts, cx, cy = ['<g class="legend">'], x, y
    for name, color, dashed in items:
        w = 22 + 7 * len(name) + 16
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 18
        if dashed:
            parts.append(f'<line x1="{cx:.1f}" y1="{cy - 4:.1f}" x2="{cx + 16:.1f}" y2="{cy - 4:.1f}" stroke="{color}" '
                         f'stroke-width="2.5" stroke-dasharray="4 3"/>')
        else:
            parts.append(f'<rect x="{cx:.1f}" y="{cy - 10:.1f}" width="14" height="11" fill="{color}"/>')
        parts.append(f'<text x="{cx + 20:.1f}" y="{cy:.1f}">{esc(name)}</text>')
        cx += w
    parts.append("</g>")
    return parts, cy + 18


# A bar chart's axis turns logarithmic when its longest bar is more than this many times its
# shortest non-zero one. Past one decade a linear axis shrinks the short bars to a few pixels:
# one monthly rental (a whole month billed for a 3-day job) made every hourly plan's bar a
# sliver (issue 26). On a log axis equal steps are equal ratios, so 20 vs 25 stays as far apart
# next to 2,000 as it is alone.
LOG_SPREAD = 10.0
# Narrow charts (phones, ~400 px wide) are drawn this wide, so at 400 px, less the page's
# padding, they show at about 1:1 and their 12 px text stays 12 px.
NARROW_WIDTH = 376


@dataclass(frozen=True)
class BarScale:
    """Where values fall along a bar chart's value axis: `offset` is pixels from the axis start.

    Linear axes start at 0; log axes at the power of ten at or below half the smallest bar, so
    the shortest bar is at least log10(2), about 0.3 of a decade, long and never vanishes.
    """

    log: bool
    ticks: tuple[float, ...]
    length: float  # pixels from the first tick to the last

    def offset(self, value: float) -> float:
        lo, hi = self.ticks[0], self.ticks[-1]
        if not self.log:
            return max(value, 0.0) / (hi or 1.0) * self.length
        if value <= lo:
            return 0.0
        return (math.log10(value) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * self.length

    def bar(self, total: float, part: float) -> float:
        """The length of `part` of a stacked bar of `total`: its share of the bar's length (on a
        log axis a segment has no length of its own; its share of the total is what it shows)."""
        return self.offset(total) * part / total if total > 0 else 0.0

    @property
    def name(self) -> str:
        return "log" if self.log else "linear"


def bar_scale(totals: Sequence[float], length: float) -> BarScale:
    """The axis for bars of these totals: linear from 0, or log past LOG_SPREAD (see there).

    >>> s = bar_scale([100.0, 120.0, 15840.0], 530)
    >>> s.log, s.ticks, round(s.offset(100.0), 2), round(s.offset(120.0), 2)
    (True, (10.0, 100.0, 1000.0, 10000.0, 100000.0), 132.5, 142.99)
    >>> bar_scale([2.0, 7.3], 100).ticks
    (0.0, 2.0, 4.0, 6.0, 8.0)
    """
    positive = [v for v in totals if v > 0]
    if positive and max(positive) > LOG_SPREAD * min(positive):
        lo_exp = math.floor(math.log10(min(positive) / 2) + 1e-9)
        hi_exp = math.ceil(math.log10(max(positive)) - 1e-9)
        return BarScale(True, tuple(log_ticks(lo_exp, hi_exp)), length)
    return BarScale(False, tuple(nice_ticks(0.0, max(positive, default=0.0) or 1.0)), length)


def log_ticks(lo_exp: int, hi_exp: int, most: int = 7) -> list[float]:
    """Ticks from 10^lo_exp to 10^hi_exp: 1, 2 and 5 in each decade when that makes at most
    `most`, else the powers of ten (every other one when even those are too many).

    >>> log_ticks(0, 2)
    [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
    >>> log_ticks(-2, 1)
    [0.01, 0.1, 1.0, 10.0]
    >>> log_ticks(0, 10)
    [1.0, 100.0, 10000.0, 1000000.0, 100000000.0, 10000000000.0]
    """
    decades = hi_exp - lo_exp
    if decades * 3 + 1 <= most:
        return [round(m * 10.0 ** e, 12) for e in range(lo_exp, hi_exp) for m in (1, 2, 5)] + [10.0 ** hi_exp]
    step = math.ceil(decades / (most - 1))
    return [round(10.0 ** e, 12) for e in range(lo_exp, hi_exp + 1, step)]


def scale_words(scale: BarScale, low: str, high: str) -> str:
    """The caption's sentence on the axis: which scale, and for a log one why and how to read it
    (`low` and `high`: the smallest and largest non-zero bar, formatted by the caller)."""
    if not scale.log:
        return "Linear scale from 0: bar lengths are in proportion to the amounts."
    return (f"Log scale: the bars span {low} to {high}, more than {LOG_SPREAD:g} times, so each gridline step "
            "is a ratio, not a difference; bars keep their order but their lengths are not in proportion, and "
            "a stacked bar's colours split it by each part's share of its total.")


def _wrap(text: str, chars: int) -> list[str]:
    """Words in lines of at most `chars` characters (a longer word gets a line of its own).

    >>> _wrap("total job cost (USD), stacked by line item", 20)
    ['total job cost', '(USD), stacked by', 'line item']
    """
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def _fit(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(1, chars - 1)].rstrip() + "…"


def bar_chart(chart_id: str, title: str, axis_label: str, groups: Sequence[tuple[str, Sequence[Bar]]],
              legend: Sequence[tuple[str, str, bool]], narrow: bool = False) -> str:
    """Horizontal (stacked) bars in labelled groups with a value for each bar and x gridlines, on
    `bar_scale`'s axis (log past LOG_SPREAD; the axis label says which).

    Wide (CHART_WIDTH): labels left of the bars, values after them. Narrow (NARROW_WIDTH, for
    phones): each bar under a line with its label and its value, so the bars get the full width.
    """
    width = NARROW_WIDTH if narrow else CHART_WIDTH
    pad = 8 if narrow else 12
    char_px = 6.6  # about one character of 12 px sans-serif
    # wide: the values follow the bars, so the longest value's room is kept right of the axis
    value_w = max([120.0] + [len(b.value_text) * char_px + 12 for _, bars in groups for b in bars])
    x0, x1 = (pad, width - pad) if narrow else (230, width - value_w)
    title_lines = _wrap(title, int((width - 2 * pad) / 8.2)) if narrow else [title]
    title_size = 14 if narrow else 15
    title_bottom = 24 + (len(title_lines) - 1) * 18
    parts, y = _legend(legend, pad, title_bottom + 26, width - 2 * pad)
    top = y + 4
    rows: list[tuple[float, str | Bar]] = []  # (y, a group's label or a bar)
    row_h = 36 if narrow else 22
    for group, bars in groups:
        if group:
            rows.append((y + 14, group))
            y += 20
        for bar in bars:
            rows.append((y, bar))
            y += row_h
    bottom = y + 4
    totals = [sum(v for v, _, _ in b.segments) for _, b in rows if isinstance(b, Bar)]
    scale = bar_scale(totals, x1 - x0)
    axis_text = f"{axis_label}, {scale.name} scale"
    axis_lines = _wrap(axis_text, int((width - 2 * pad) / char_px)) if narrow else [axis_text]
    height = bottom + 38 + 16 * len(axis_lines)
    svg = [f'<svg class="chart" id="{esc(chart_id)}" viewBox="0 0 {width} {height:.0f}" width="{width}" '
           f'height="{height:.0f}" role="img" aria-labelledby="{esc(chart_id)}-title" font-size="12" '
           f'data-scale="{scale.name}">',
           f'<title id="{esc(chart_id)}-title">{esc(title)}</title>']
    svg += [f'<text class="chart-title" x="{pad}" y="{24 + 18 * i}" font-size="{title_size}" font-weight="bold">'
            f'{esc(line)}</text>' for i, line in enumerate(title_lines)]
    svg.append('<g class="grid" stroke="#dddddd">')
    for t in scale.ticks:
        x = x0 + scale.offset(t)
        svg.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}"/>')
    svg.append("</g>")
    svg += parts
    for ry, item in rows:
        if not isinstance(item, Bar):
            svg.append(f'<text class="group-label" x="{pad}" y="{ry:.1f}" font-weight="bold">{esc(item)}</text>')
            continue
        if narrow:
            bar_y, text_y = ry + 17, ry + 13
            svg.append(f'<text class="label" x="{pad}" y="{text_y:.1f}">{esc(item.label)}</text>')
        else:
            bar_y, text_y = ry + 4, ry + 16
            svg.append(f'<text class="label" x="{x0 - 8}" y="{ry + 15:.1f}" text-anchor="end">{esc(item.label)}</text>')
        total = sum(v for v, _, _ in item.segments)
        cx = float(x0)
        for value, color, tip in item.segments:
            w = max(scale.bar(total, value), 0.0)
            svg.append(f'<rect class="bar" x="{cx:.1f}" y="{bar_y:.1f}" width="{w:.1f}" height="{12 if narrow else 15}" '
                       f'fill="{color}"><title>{esc(tip)}</title></rect>')
            cx += w
        if item.segments or not item.note:
            if narrow:
                svg.append(f'<text class="value" x="{width - pad}" y="{text_y:.1f}" text-anchor="end">'
                           f'{esc(item.value_text)}</text>')
            else:
                svg.append(f'<text class="value" x="{cx + 5:.1f}" y="{text_y:.1f}">{esc(item.value_text)}</text>')
        else:
            # no bar: the note takes the bar's place (on a phone, the line under the label)
            note_x, note_y = (pad, bar_y + 10) if narrow else (x0 + 4, text_y)
            room = int((width - pad - note_x) / char_px)
            svg.append(f'<text class="note" x="{note_x}" y="{note_y:.1f}" fill="#666666" font-style="italic">'
                       f'<title>{esc(item.note)}</title>{esc(_fit(item.note, room))}</text>')
    svg.append(f'<line class="axis" x1="{x0}" y1="{bottom:.1f}" x2="{x1}" y2="{bottom:.1f}" stroke="#333333"/>')
    for t in scale.ticks:
        x = x0 + scale.offset(t)
        anchor = "start" if narrow and t == scale.ticks[0] else "end" if narrow and t == scale.ticks[-1] else "middle"
        svg.append(f'<text class="tick" x="{x:.1f}" y="{bottom + 16:.1f}" text-anchor="{anchor}">{_tick_text(t)}</text>')
    svg += [f'<text class="axis-label" x="{(x0 + x1) / 2:.1f}" y="{bottom + 38 + 16 * i:.1f}" text-anchor="middle">'
            f'{esc(line)}</text>' for i, line in enumerate(axis_lines)]
    svg.append("</svg>")
    return "\n".join(svg)


def line_chart(chart_id: str, title: str, y_label: str, series: Sequence[tuple[str, str, bool, Sequence[tuple[datetime, float]]]],
               width: int = 400, height: int = 270) -> str:
    """Price over time: one line (and dots) per series, dashed for spot, gridlines both ways.

    400 wide: at a phone's ~376 px its 11 px text still shows at over 10 px, and on a desktop
    two or three sit side by side."""
    left, right, top, plot_h = 62, 14, 36, height - 36 - 56
    times = sorted({t for *_, pts in series for t, _ in pts})
    values = [v for *_, pts in series for _, v in pts]
    t0, t1 = times[0], times[-1]
    if t1 == t0:  # one refresh so far: an hour either side, so its tick reads as a time
        t0, t1 = t0 - timedelta(hours=1), t1 + timedelta(hours=1)
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.1 or hi * 0.1 or 1.0
    yticks = nice_ticks(max(0.0, lo - pad), hi + pad)
    y_lo, y_hi = yticks[0], yticks[-1]
    plot_w = width - left - right
    span = (t1 - t0).total_seconds()

    def px(t: datetime) -> float:
        return left + (t - t0).total_seconds() / span * plot_w

    def py(v: float) -> float:
        return top + plot_h - (v - y_lo) / ((y_hi - y_lo) or 1.0) * plot_h

    legend, legend_bottom = _legend([(name, color, dashed) for name, color, dashed, _ in series], 12, top + plot_h + 50,
                                    width - 24)
    height = max(height, int(legend_bottom))
    svg = [f'<svg class="chart" id="{esc(chart_id)}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-labelledby="{esc(chart_id)}-title" font-size="11">',
           f'<title id="{esc(chart_id)}-title">{esc(title)}</title>',
           f'<text class="chart-title" x="10" y="18" font-size="13" font-weight="bold">{esc(title)}</text>',
           '<g class="grid" stroke="#e3e3e3">']
    for v in yticks:
        svg.append(f'<line x1="{left}" y1="{py(v):.1f}" x2="{left + plot_w}" y2="{py(v):.1f}"/>')
    for count in (5, 4, 3, 2):  # fewer ticks when their labels (11 px, ~6 px a character) would touch
        xticks, fmt = time_ticks(t0, t1, count)
        if max(len(f"{t:{fmt}}") for t in xticks) * 6.2 + 12 <= plot_w / max(1, len(xticks)):
            break
    for t in xticks:
        svg.append(f'<line x1="{px(t):.1f}" y1="{top}" x2="{px(t):.1f}" y2="{top + plot_h}"/>')
    svg.append("</g>")
    svg.append(f'<path class="axis" d="M{left},{top} V{top + plot_h} H{left + plot_w}" stroke="#333333" fill="none"/>')
    for v in yticks:
        svg.append(f'<text class="tick" x="{left - 5}" y="{py(v) + 4:.1f}" text-anchor="end">{_tick_text(v)}</text>')
    for t in xticks:
        # a label centred on a tick near the right edge would be cut off: moved left to fit
        x = min(px(t), width - 2 - len(f"{t:{fmt}}") * 3.2)
        svg.append(f'<text class="tick" x="{x:.1f}" y="{top + plot_h + 15}" text-anchor="middle">{t:{fmt}}</text>')
    svg.append(f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{top + plot_h + 32}" text-anchor="middle">'
               f'snapshot date (UTC)</text>')
    svg.append(f'<text class="axis-label" x="12" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 12 {top + plot_h / 2:.1f})">{esc(y_label)}</text>')
    for name, color, dashed, pts in series:
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        if len(pts) > 1:
            d = " ".join(f"{'M' if i == 0 else 'L'}{px(t):.1f},{py(v):.1f}" for i, (t, v) in enumerate(pts))
            svg.append(f'<path class="series" d="{d}" stroke="{color}" stroke-width="2" fill="none"{dash}/>')
        for t, v in pts:
            svg.append(f'<circle class="point" cx="{px(t):.1f}" cy="{py(v):.1f}" r="3" fill="{color}">'
                       f'<title>{esc(name)}: {_tick_text(v)} on {t:%Y-%m-%d %H:%M}</title></circle>')
    svg += legend
    svg.append("</svg>")
    return "\n".join(svg)


# Steps for time ticks, finest first: minutes and hours (aligned to the UTC clock), days
# (aligned to UTC midnight), then calendar months and years.
_CLOCK_STEPS = [timedelta(minutes=m) for m in (1, 2, 5, 10, 15, 30)] + \
               [timedelta(hours=h) for h in (1, 2, 3, 6, 12)] + [timedelta(days=d) for d in (1, 2, 7, 14)]
_MONTH_STEPS = (1, 2, 3, 6, 12, 24, 60)
_EPOCH = datetime(2000, 1, 3, tzinfo=timezone.utc)  # a Monday: weekly ticks fall on Mondays


def time_ticks(t0: datetime, t1: datetime, count: int = 5) -> tuple[list[datetime], str]:
    """Round tick times in [t0, t1] (at most `count`) and the strftime format that tells them apart.

    The step is the finest of 1-30 minutes, 1-12 hours, 1-14 days, or 1-60 months that puts no
    more than `count` ticks in the span; the format shows what changes between ticks, and no more.

    >>> u = timezone.utc
    >>> time_ticks(datetime(2026, 12, 1, 3, 2, tzinfo=u), datetime(2026, 12, 1, 3, 41, tzinfo=u))[1]
    '%H:%M'
    >>> ticks, fmt = time_ticks(datetime(2026, 11, 3, tzinfo=u), datetime(2026, 11, 28, tzinfo=u))
    >>> [f"{t:{fmt}}" for t in ticks]
    ['11-09', '11-16', '11-23']
    """
    t0, t1 = t0.astimezone(timezone.utc), t1.astimezone(timezone.utc)
    span = t1 - t0
    if span < timedelta(minutes=1):  # no minute boundary may fall inside: the ends themselves
        return sorted({t0, t1}), "%H:%M:%S"
    for step in _CLOCK_STEPS:
        if span / step > count + 1:
            continue
        first = _EPOCH + step * math.ceil((t0 - _EPOCH) / step)
        ticks = []
        while first + step * len(ticks) <= t1:
            ticks.append(first + step * len(ticks))
        if len(ticks) > count:
            continue
        if step < timedelta(days=1):
            return ticks, "%H:%M" if t0.date() == t1.date() else "%m-%d %H:%M"
        return ticks, "%Y-%m-%d" if t0.year != t1.year else "%m-%d"
    months0 = t0.year * 12 + t0.month - 1
    months1 = t1.year * 12 + t1.month - 1
    for step_m in _MONTH_STEPS:
        start = months0 + (-months0 % step_m)
        if _month_start(start) < t0:
            start += step_m
        ticks = [_month_start(m) for m in range(start, months1 + 1, step_m)]
        if len(ticks) <= count or step_m == _MONTH_STEPS[-1]:
            return ticks, "%Y" if step_m % 12 == 0 else "%Y-%m"
    raise AssertionError("unreachable")  # pragma: no cover


def _month_start(months: int) -> datetime:
    return datetime(months // 12, months % 12 + 1, 1, tzinfo=timezone.utc)
