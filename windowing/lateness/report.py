"""The lateness report: one self-contained HTML page (inline SVG, no script, no network).

:func:`render_report` turns the figures of :func:`windowing.lateness.job.lateness` into a
page with four plots (late share against the delay per strategy, emission latency against
the delay, how late the late events were, late events by hour of arrival) and the tables
behind them. Pure string building: no Spark, no plotting library.
"""

from __future__ import annotations

import html
import math
from typing import Any, Callable, Mapping, Sequence

from windowing.durations import format_duration_ms, human_duration

#: One colour per (strategy, lateness mode) series, in the order the figures list them.
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
_W, _H = 640, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 16, 44


def render_report(figures: Mapping[str, Any]) -> str:
    """The whole page for one lateness run."""

    f = figures
    cfg, cr = f["configured"], f["configured_replay"]
    title = f"Lateness of {f['pipeline']}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class=sub>{f['accepted_events']:,} events replayed ({f['rejected_rows']:,} rejected) under "
        f"{len(f['variants'])} configurations in {f.get('seconds', 0):.1f} s. Configured: "
        f"<b>{_e(cfg['strategy'])}</b>, {_e(cfg['lateness'])}, delayWindowClose "
        f"<b>{_d(cfg['delay_ms'])}</b>: {cr['late_events']:,} late events "
        f"(<b>{_pct(cr['late_share'])}</b>), {f['cost']['windows']:,} windows missed events.</p>",
        _recommendations(f),
        '<div class="grid">',
        _figure(
            "Late events against the delay",
            _late_share_plot(f),
            "Share of events late under each delayWindowClose, exact at every delay (from each event's slack); "
            "dots: the replays at the listed delays; the dashed line is the target.",
        ),
        _figure(
            "Emission latency against the delay",
            _latency_plot(f),
            "Arrival time of the commit that closes a window minus the window's end "
            "(WATERMARK, IDLE, MAX_DURATION closes): p50 (solid) and p99 (dotted).",
        ),
        _figure(
            "How late the late events were",
            _histogram_plot(f),
            "Configured replay: late events by lateness (the watermark they were checked against minus their "
            "event time; an event by its latest missed window).",
        ),
        _figure(
            "Late events by hour of arrival",
            _hours_plot(f),
            "Configured replay: late events per hour of arrival (bars) and their share of the hour's events (line).",
        ),
        "</div>",
        "<h2>Curves at the listed delays</h2>",
        _curve_table(f),
        "<h2>Windows that missed the most events</h2>",
        _worst_table(f),
        "<h2>Late share per worker</h2>",
        _rows_table(f.get("late_by_worker", []), exclude=("late_event_windows",)),
        "<h2>Future skew</h2>",
        _skew(f),
        f"<p class=sub>How each figure is computed: docs/lateness.md. Variants: {_e(', '.join(f['variants']))}.</p>",
        "</body></html>",
    ]
    return "\n".join(parts)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1360px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#555;font-size:13px}.grid{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:18px}
figure{margin:0;border:1px solid #ddd;border-radius:6px;padding:10px}figcaption{font-size:12px;color:#555}
figure h3{font-size:14px;margin:0 0 6px}table{border-collapse:collapse;font-size:12px}
td,th{border-bottom:1px solid #eee;padding:3px 8px;text-align:right}th{background:#f6f6f6}
td.l,th.l{text-align:left}.rec{display:flex;gap:14px;flex-wrap:wrap}
.card{border:1px solid #ddd;border-left:5px solid var(--c);border-radius:6px;padding:8px 12px;font-size:13px}
.card b{font-size:16px}svg text{font-size:11px;fill:#444}.legend{font-size:12px}
"""


def _e(v: Any) -> str:
    return html.escape(str(v))


def _d(ms: float | None) -> str:
    return "-" if ms is None else format_duration_ms(int(ms))


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.4g} %"


def _ms_label(v: float | None) -> str:
    if v is None:
        return "-"
    v = float(v)
    if abs(v) >= 60_000:
        return f"{v / 60_000:.1f} min"
    return f"{v / 1000:.2f} s" if abs(v) >= 1000 else f"{v:.0f} ms"


def _series(f: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(strategy, lateness, colour) of each plotted series."""
    seen = []
    for r in f["curves"]:
        k = (r["strategy"], r["lateness"])
        if k not in seen:
            seen.append(k)
    return [(s, m, COLOURS[i % len(COLOURS)]) for i, (s, m) in enumerate(seen)]


def _recommendations(f: Mapping[str, Any]) -> str:
    cards = []
    colours = {(s, m): c for s, m, c in _series(f)}
    for r in f["recommendations"]:
        listed = (
            f"of the listed delays: <b>{_d(r['listed_delay_ms'])}</b> (late {_pct(r['listed_late_share'])}, "
            f"latency p50 {_ms_label(r['listed_latency_p50_ms'])}, p99 {_ms_label(r['listed_latency_p99_ms'])})"
            if r["listed_delay_ms"] is not None
            else "none of the listed delays is enough"
        )
        cards.append(
            f'<div class="card" style="--c:{colours.get((r["strategy"], r["lateness"]), "#888")}">'
            f"{_e(r['strategy'])} · {_e(r['lateness'])}<br>late events ≤ {_pct(r['target_late'])} needs "
            f"delay ≥ <b>{_e(human_duration(r['smallest_delay_ms']))}</b> ({_pct(r['late_share_at_smallest'])})"
            f"<br>{listed}</div>"
        )
    return f"<h2>Recommendation</h2><div class=rec>{''.join(cards)}</div>"


def _figure(title: str, svg: str, caption: str) -> str:
    return f"<figure><h3>{_e(title)}</h3>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


# --------------------------------------------------------------------------- plots


def _xdelay(ms: float, max_ms: float) -> float:
    """Delay axis: log10(1 + ms), so 0 sits at the left edge."""
    span = math.log10(1 + max(max_ms, 1000))
    return _LEFT + (_W - _LEFT - _RIGHT) * math.log10(1 + max(ms, 0)) / span


def _y(v: float, top: float, log: bool = False, bottom: float = 0.0) -> float:
    h = _H - _TOP - _BOTTOM
    if log:
        lo, hi = math.log10(bottom), math.log10(top)
        frac = (math.log10(max(v, bottom)) - lo) / (hi - lo) if hi > lo else 0
    else:
        frac = v / top if top else 0
    return _TOP + h * (1 - frac)


def _svg(body: list[str]) -> str:
    return (
        f'<svg viewBox="0 0 {_W} {_H}" width="100%" role="img" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def _delay_axis(max_ms: float) -> list[str]:
    out = [f'<line x1="{_LEFT}" y1="{_H - _BOTTOM}" x2="{_W - _RIGHT}" y2="{_H - _BOTTOM}" stroke="#999"/>']
    for ms in (0, 10, 100, 1_000, 10_000, 60_000, 600_000, 3_600_000, 36_000_000, 86_400_000):
        if ms > max(max_ms, 1000) * 1.01:
            break
        x = _xdelay(ms, max_ms)
        out.append(
            f'<line x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{_H - _BOTTOM}" stroke="#eee"/>'
            f'<text x="{x:.1f}" y="{_H - _BOTTOM + 14}" text-anchor="middle">{_d(ms)}</text>'
        )
    out.append(f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 6}" text-anchor="middle">delayWindowClose</text>')
    return out


def _value_axis(top: float, fmt: Callable[[float], str], ticks: int = 4) -> list[str]:
    out = [f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_H - _BOTTOM}" stroke="#999"/>']
    for i in range(ticks + 1):
        v = top * i / ticks
        y = _y(v, top)
        out.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}" stroke="#f0f0f0"/>'
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_e(fmt(v))}</text>'
        )
    return out


def _legend(items: Sequence[tuple[str, str]], x: float, y: float) -> list[str]:
    out = []
    for i, (label, colour) in enumerate(items):
        yy = y + 14 * i
        out.append(
            f'<rect x="{x}" y="{yy - 8}" width="10" height="3" fill="{colour}"/>'
            f'<text x="{x + 14}" y="{yy}" class="legend">{_e(label)}</text>'
        )
    return out


def _nice(v: float) -> float:
    if v <= 0:
        return 1.0
    e: float = 10 ** math.floor(math.log10(v))  # an int for v >= 1, as before
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * e:
            return m * e
    return 10 * e


def _late_share_plot(f: Mapping[str, Any]) -> str:
    points = f.get("late_curve_points", {})
    series = _series(f)
    max_ms = max([p[0] for s in points.values() for p in s] + list(f["delays_ms"]) + [1000])
    top = _nice(max([p[1] for s in points.values() for p in s] + [f["target_late"] * 1.5, 1e-6]))
    body = _value_axis(top, lambda v: f"{100 * v:.3g} %") + _delay_axis(max_ms)
    for s, m, colour in series:
        pts = points.get(f"{s}/{m}", [])
        if pts:  # a step function: flat until the next delay
            path: list[str] = []
            prev: float | None = None
            for d, share in pts:
                x, y = _xdelay(d, max_ms), _y(share, top)
                if prev is not None:
                    path.append(f"L{x:.1f},{prev:.1f}")
                path.append(("M" if not path else "L") + f"{x:.1f},{y:.1f}")
                prev = y
            path.append(f"L{_xdelay(max_ms, max_ms):.1f},{prev:.1f}")
            body.append(f'<path d="{"".join(path)}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for r in f["curves"]:
            if (r["strategy"], r["lateness"]) == (s, m):
                body.append(
                    f'<circle cx="{_xdelay(r["delay_ms"], max_ms):.1f}" cy="{_y(r["late_share"], top):.1f}" '
                    f'r="3.5" fill="{colour}"><title>{_e(s)} {_d(r["delay_ms"])}: '
                    f"{_pct(r['late_share'])}</title></circle>"
                )
    ty = _y(f["target_late"], top)
    body.append(
        f'<line x1="{_LEFT}" y1="{ty:.1f}" x2="{_W - _RIGHT}" y2="{ty:.1f}" stroke="#555" '
        f'stroke-dasharray="5,4"/><text x="{_W - _RIGHT - 4}" y="{ty - 4:.1f}" text-anchor="end">target '
        f"{_pct(f['target_late'])}</text>"
    )
    labels = _coinciding_labels(series, {(s, m): tuple(map(tuple, points.get(f"{s}/{m}", []))) for s, m, _ in series})
    body += _legend(labels, _LEFT + 10, _H - _BOTTOM - 14 * len(series) - 6)
    return _svg(body)


def _coinciding_labels(
    series: Sequence[tuple[str, str, str]], data: Mapping[tuple[str, str], tuple[Any, ...]]
) -> list[tuple[str, str]]:
    """``(label, colour)`` of each plotted series; a series whose curve is another's exactly
    (the strategies often agree: one hides the other) says so: ``MAX per-key (same curve
    as MIN per-key, drawn over it)``."""
    out: list[tuple[str, str]] = []
    seen: dict[tuple[Any, ...], str] = {}
    for s, m, colour in series:
        label = f"{s} {m}"
        curve = data.get((s, m), ())
        if curve and curve in seen:
            label += f" (same curve as {seen[curve]}, drawn over it)"
        elif curve:
            seen[curve] = label
        out.append((label, colour))
    return out


def _latency_plot(f: Mapping[str, Any]) -> str:
    series = _series(f)
    rows = [r for r in f["curves"] if r["latency_p99_ms"] is not None]
    if not rows:
        return _svg(['<text x="20" y="40">no window closed in this history</text>'])
    max_ms = max(list(f["delays_ms"]) + [1000])
    top = _nice(max(r["latency_p99_ms"] for r in rows))
    body = _value_axis(top, _ms_label) + _delay_axis(max_ms)
    for s, m, colour in series:
        mine = sorted((r for r in rows if (r["strategy"], r["lateness"]) == (s, m)), key=lambda r: r["delay_ms"])
        for key, dash in (("latency_p50_ms", ""), ("latency_p99_ms", ' stroke-dasharray="2,3"')):
            pts = " ".join(f"{_xdelay(r['delay_ms'], max_ms):.1f},{_y(r[key], top):.1f}" for r in mine)
            body.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
            for r in mine:
                body.append(
                    f'<circle cx="{_xdelay(r["delay_ms"], max_ms):.1f}" cy="{_y(r[key], top):.1f}" r="3" '
                    f'fill="{colour}"><title>{_e(s)} {_d(r["delay_ms"])} {key[8:11]}: '
                    f"{_ms_label(r[key])}</title></circle>"
                )
    curves = {
        (s, m): tuple(
            (r["delay_ms"], r["latency_p50_ms"], r["latency_p99_ms"])
            for r in sorted((r for r in rows if (r["strategy"], r["lateness"]) == (s, m)), key=lambda r: r["delay_ms"])
        )
        for s, m, _ in series
    }
    body += _legend(_coinciding_labels(series, curves), _LEFT + 10, _TOP + 12)
    return _svg(body)


def _bars(labels: list[str], values: list[float], top: float, colour: str, fmt: Callable[[float], str]) -> list[str]:
    n = max(len(values), 1)
    width = (_W - _LEFT - _RIGHT) / n
    out = []
    for i, (label, v) in enumerate(zip(labels, values)):
        x, y = _LEFT + i * width, _y(v, top)
        out.append(
            f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{max(width - 2, 1):.1f}" '
            f'height="{_H - _BOTTOM - y:.1f}" fill="{colour}"><title>{_e(label)}: {_e(fmt(v))}</title></rect>'
        )
    step = max(1, math.ceil(n / 8))
    for i in range(0, n, step):
        x = _LEFT + (i + 0.5) * width
        out.append(f'<text x="{x:.1f}" y="{_H - _BOTTOM + 14}" text-anchor="middle">{_e(labels[i])}</text>')
    return out


def _histogram_plot(f: Mapping[str, Any]) -> str:
    bins = f.get("lateness_histogram", [])
    if not bins:
        return _svg(['<text x="20" y="40">no late events</text>'])
    labels, prev = [], 0
    for b in bins:
        labels.append(f"≤{_d(b['upper_ms'])}" if b["upper_ms"] >= 0 else f">{_d(prev)}")
        prev = b["upper_ms"] if b["upper_ms"] >= 0 else prev
    values = [b["events"] for b in bins]
    top = _nice(max(values))
    body = _value_axis(top, lambda v: f"{v:,.0f}") + _bars(labels, values, top, "#d62728", lambda v: f"{v:,.0f}")
    body.append(f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 6}" text-anchor="middle">lateness</text>')
    return _svg(body)


def _hours_plot(f: Mapping[str, Any]) -> str:
    hours = f.get("late_by_hour", [])
    if not hours:
        return _svg(['<text x="20" y="40">no events</text>'])
    labels = [h["hour"][5:13].replace("T", " ") + "h" for h in hours]  # MM-DD HHh
    late = [h["late_events"] for h in hours]
    top = _nice(max(late + [1]))
    body = _value_axis(top, lambda v: f"{v:,.0f}") + _bars(labels, late, top, "#1f77b4", lambda v: f"{v:,.0f}")
    shares = [h["late_events"] / h["events"] if h["events"] else 0 for h in hours]
    stop = _nice(max(shares + [1e-6]))
    width = (_W - _LEFT - _RIGHT) / max(len(hours), 1)
    pts = " ".join(f"{_LEFT + (i + 0.5) * width:.1f},{_y(s, stop):.1f}" for i, s in enumerate(shares))
    body.append(f'<polyline points="{pts}" fill="none" stroke="#ff7f0e" stroke-width="2"/>')
    body.append(
        f'<text x="{_W - _RIGHT}" y="{_TOP + 10}" text-anchor="end" fill="#ff7f0e">late share (top {_pct(stop)})</text>'
    )
    return _svg(body)


# --------------------------------------------------------------------------- tables


def _curve_table(f: Mapping[str, Any]) -> str:
    head = (
        "strategy",
        "lateness",
        "delay",
        "late events",
        "late share",
        "late pairs",
        "closed",
        "IDLE",
        "open at end",
        "latency p50",
        "p90",
        "p99",
        "max",
    )
    rows = []
    for r in f["curves"]:
        rows.append(
            [
                r["strategy"],
                r["lateness"],
                _d(r["delay_ms"]) + (" (configured)" if r["configured"] else ""),
                f"{r['late_events']:,}",
                _pct(r["late_share"]),
                f"{r['late_event_windows']:,}",
                f"{r['windows_closed']:,}",
                f"{r['closed_idle']:,}",
                f"{r['open_windows']:,}",
                _ms_label(r["latency_p50_ms"]),
                _ms_label(r["latency_p90_ms"]),
                _ms_label(r["latency_p99_ms"]),
                _ms_label(r["latency_max_ms"]),
            ]
        )
    return _table(head, rows, left=2)


def _worst_table(f: Mapping[str, Any]) -> str:
    """Key, window, missed events and, per aggregate, the value emitted and the value with
    the missed events (a perfect watermark's)."""
    worst = f["cost"]["worst_windows"]
    if not worst:
        return "<p class=sub>No window missed an event.</p>"
    fixed = {
        "window_start",
        "window_end",
        "missed_events",
        "max_lateness_ms",
        "first_missed_arrival",
        "last_missed_arrival",
        "emissions",
        "last_emit_reason",
        "last_emit_time",
    }
    aggs = [k[len("emitted_") :] for k in worst[0] if k.startswith("emitted_")]
    keys = [k for k in worst[0] if k not in fixed and not k.startswith(("emitted_", "perfect_"))]
    head = (
        keys
        + ["window", "missed", "max lateness", "emissions", "last emitted by"]
        + [f"{a}: emitted → perfect" for a in aggs]
    )
    rows = []
    for r in worst:
        rows.append(
            [_cell(r[k]) for k in keys]
            + [
                f"{_short(r['window_start'])} – {_short(r['window_end'])}",
                f"{r['missed_events']:,}",
                _ms_label(r["max_lateness_ms"]),
                f"{r['emissions']:,}",
                r["last_emit_reason"] or "-",
            ]
            + [f"{_cell(r.get('emitted_' + a)) or '-'} → {_cell(r.get('perfect_' + a)) or '-'}" for a in aggs]
        )
    return _table(head, rows, left=len(keys) + 1)


def _short(ts: object) -> str:
    """An ISO time without the year and seconds' fraction: ``01-02 13:00:00``."""
    return "" if ts is None else str(ts)[5:19].replace("T", " ")


def _rows_table(rows: Sequence[Mapping[str, Any]], exclude: Sequence[str] = ()) -> str:
    if not rows:
        return "<p class=sub>None.</p>"
    head = [k for k in rows[0] if k not in exclude]
    body = [[_cell(r.get(k)) for k in head] for r in rows]
    return _table(head, body, left=0)


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "" if v is None else str(v)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(head))
    trs = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_e(c)}</td>' for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{th}</tr>{trs}</table>"


def _skew(f: Mapping[str, Any]) -> str:
    s = f["future_skew"]
    if s.get("threshold_ms") is None:
        return "<p class=sub>Not listed (--future-skew off, or no event-time column).</p>"
    text = (
        f"<p>{s['skewed_events']:,} events were more than <b>{_d(s['threshold_ms'])}</b> ahead of their arrival. "
        f"They moved watermarks forward and caused <b>{s['late_events_caused']:,}</b> late events "
        f"({s['late_event_windows_caused']:,} late (event, window) pairs; "
        f"{s.get('late_event_windows_attributed', 0):,} of them attributed to the skewed event that set the "
        f"watermark). Without them the configured pipeline would have had "
        f"{s.get('late_events_without_skewed', 0):,} late events and "
        f"{s.get('idle_closes_without_skewed', 0):,} IDLE closes (now {s.get('idle_closes', 0):,}). "
        f"<code>source.maxFutureSkew: {_d(s['threshold_ms'])}</code> would reject them (reason FUTURE_SKEW).</p>"
    )
    if s.get("max_future_skew_ms") is not None:
        text += (
            f"<p class=sub>The pipeline already rejects events more than {_d(s['max_future_skew_ms'])} ahead: "
            f"{s['rejected_by_max_future_skew']:,} rows.</p>"
        )
    return text
