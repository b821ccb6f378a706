"""The diff's report: one self-contained HTML page (no script, no network, every text
escaped), from the figures: the verdict, the columns added and removed, the totals and a
table per partition. Pure string building."""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from windowing.diff.compare import CHANGED, IN_PARTITION_ONLY_IN_AFTER, IN_PARTITION_ONLY_IN_BEFORE
from windowing.diff.compare import ONLY_IN_AFTER as _OA
from windowing.diff.compare import ONLY_IN_BEFORE as _OB
from windowing.diff.text import NOUNS, changed_text

_HEAD = ("", "before", "after", "changed", "only in BEFORE", "only in AFTER", "not compared", "changed columns")


def render_report(f: Mapping[str, Any]) -> str:
    """The whole page of one diff."""
    title = f"Diff of {f.get('pipeline') or 'two versions'}"
    verdict = "equal" if f["equal"] else "different"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}: <span class={verdict}>{_e(verdict.upper())}</span></h1>",
        f"<p class=sub>BEFORE {_e(_side(f['before']))}<br>AFTER {_e(_side(f['after']))}<br>"
        f"compared in {float(f.get('seconds', 0)):.1f} s"
        + ("" if f["partitioned"] else "; as a whole (the sides have no partitions that line up)")
        + "</p>",
        _columns(f),
        "<h2>Total</h2>",
        _table(f["total"]),
    ]
    for p in f["partitions"]:
        parts.append(f"<h2>Partition {_e(p['partition_key'])}</h2>")
        if p["status"] != "in both":
            parts.append(f"<p class=note>{_e(p['status'])}</p>")
        parts.append(_table({n: p[n] for n in NOUNS}))
    parts += ["<p class=sub>How each figure is computed: docs/diff.md.</p>", "</body></html>"]
    return "\n".join(parts)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1360px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:24px 0 8px}.sub{color:#555;font-size:13px}
.equal{color:#2ca02c}.different{color:#d62728}.note{font-size:13px;color:#8c564b}
table{border-collapse:collapse;font-size:12px}td,th{border-bottom:1px solid #eee;padding:3px 8px;text-align:right}
th{background:#f6f6f6}td.l,th.l{text-align:left}
"""


def _e(v: Any) -> str:
    return html.escape(str(v))


def _side(s: Mapping[str, Any]) -> str:
    n = len(s["partitions"])
    return f"{s['location']} ({s['kind']}" + (f", {n} partition(s))" if s["kind"] == "history" else ")")


def _columns(f: Mapping[str, Any]) -> str:
    items = []
    for name, cols in f["columns"].items():
        for what in ("added", "removed"):
            if cols[what]:
                items.append(f"<li>{_e(NOUNS[name])}: columns {what}: <b>{_e(', '.join(cols[what]))}</b></li>")
        for c, (t1, t2) in cols["retyped"].items():
            items.append(f"<li>{_e(NOUNS[name])}: column {_e(c)} is {_e(t1)} in BEFORE, {_e(t2)} in AFTER</li>")
    return f"<h2>Columns</h2><ul>{''.join(items)}</ul>" if items else "<p class=sub>The same columns on both sides.</p>"


def _table(blocks: Mapping[str, Mapping[str, Any]]) -> str:
    rows: list[Sequence[str]] = []
    for name, b in blocks.items():
        rows.append(
            [
                NOUNS[name],
                f"{b['before_rows']:,}",
                f"{b['after_rows']:,}",
                f"{b[CHANGED]:,}",
                f"{b[_OB]:,}",
                f"{b[_OA]:,}",
                f"{b[IN_PARTITION_ONLY_IN_BEFORE] + b[IN_PARTITION_ONLY_IN_AFTER]:,}",
                changed_text(b),
            ]
        )
    th = "".join(f'<th class="{"l" if i in (0, 7) else ""}">{_e(h)}</th>' for i, h in enumerate(_HEAD))
    trs = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i in (0, 7) else ""}">{_e(c)}</td>' for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{th}</tr>{trs}</table>"
