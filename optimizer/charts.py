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


def bar_chart(chart_id: str, title: str, axis_label: str, groups: Sequence[tuple[str, Sequence[Bar]]],
              legend: Sequence[tuple[str, str, bool]]) -> str:
    """Horizontal (stacked) bars in labelled groups, value at the end of each bar, x gridlines."""
    width, label_w, value_w = CHART_WIDTH, 230, 120
    x0, x1 = label_w, width - value_w
    parts, y = _legend(legend, 12, 50, width - 24)
    top = y + 4
    rows: list[tuple[float, str | Bar]] = []  # (y, a group's label or a bar)
    for group, bars in groups:
        if group:
            rows.append((y + 14, group))
            y += 20
        for bar in bars:
            rows.append((y, bar))
            y += 22
    bottom = y + 4
    vmax = max((sum(v for v, _, _ in b.segments) for _, b in rows if isinstance(b, Bar)), default=0.0)
    ticks = nice_ticks(0.0, vmax or 1.0)
    scale = (x1 - x0) / (ticks[-1] or 1.0)
    height = bottom + 52
    svg = [f'<svg class="chart" id="{esc(chart_id)}" viewBox="0 0 {width} {height:.0f}" width="{width}" '
           f'height="{height:.0f}" role="img" aria-labelledby="{esc(chart_id)}-title" font-size="12">',
           f'<title id="{esc(chart_id)}-title">{esc(title)}</title>',
           f'<text class="chart-title" x="12" y="24" font-size="15" font-weight="bold">{esc(title)}</text>',
           '<g class="grid" stroke="#dddddd">']
    for t in ticks:
        x = x0 + t * scale
        svg.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}"/>')
    svg.append("</g>")
    svg += parts
    for ry, item in rows:
        if not isinstance(item, Bar):
            svg.append(f'<text class="group-label" x="12" y="{ry:.1f}" font-weight="bold">{esc(item)}</text>')
            continue
        svg.append(f'<text x="{x0 - 8}" y="{ry + 15:.1f}" text-anchor="end">{esc(item.label)}</text>')
        cx = float(x0)
        for value, color, tip in item.segments:
            w = max(value * scale, 0.0)
            svg.append(f'<rect class="bar" x="{cx:.1f}" y="{ry + 4:.1f}" width="{w:.1f}" height="15" fill="{color}">'
                       f'<title>{esc(tip)}</title></rect>')
            cx += w
        if item.segments:
            svg.append(f'<text class="value" x="{cx + 5:.1f}" y="{ry + 16:.1f}">{esc(item.value_text)}</text>')
        else:
            svg.append(f'<text class="note" x="{x0 + 4}" y="{ry + 16:.1f}" fill="#666666" font-style="italic">'
                       f'{esc(item.note)}</text>')
    svg.append(f'<line class="axis" x1="{x0}" y1="{bottom:.1f}" x2="{x1}" y2="{bottom:.1f}" stroke="#333333"/>')
    for t in ticks:
        x = x0 + t * scale
        svg.append(f'<text class="tick" x="{x:.1f}" y="{bottom + 16:.1f}" text-anchor="middle">{_tick_text(t)}</text>')
    svg.append(f'<text class="axis-label" x="{(x0 + x1) / 2:.1f}" y="{bottom + 38:.1f}" text-anchor="middle">'
               f'{esc(axis_label)}</text>')
    svg.append("</svg>")
    return "\n".join(svg)


def line_chart(chart_id: str, title: str, y_label: str, series: Sequence[tuple[str, str, bool, Sequence[tuple[datetime, float]]]],
               width: int = 430, height: int = 270) -> str:
    """Price over time: one line (and dots) per series, dashed for spot, gridlines both ways."""
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
    xticks, fmt = time_ticks(t0, t1)
    for t in xticks:
        svg.append(f'<line x1="{px(t):.1f}" y1="{top}" x2="{px(t):.1f}" y2="{top + plot_h}"/>')
    svg.append("</g>")
    svg.append(f'<path class="axis" d="M{left},{top} V{top + plot_h} H{left + plot_w}" stroke="#333333" fill="none"/>')
    for v in yticks:
        svg.append(f'<text class="tick" x="{left - 5}" y="{py(v) + 4:.1f}" text-anchor="end">{_tick_text(v)}</text>')
    for t in xticks:
        svg.append(f'<text class="tick" x="{px(t):.1f}" y="{top + plot_h + 15}" text-anchor="middle">{t:{fmt}}</text>')
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
