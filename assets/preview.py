"""A few rows of a Spark DataFrame as a Markdown table, for materialization metadata."""

from __future__ import annotations

import dagster as dg

PREVIEW_ROWS = 5


def markdown_preview(df, rows: int = PREVIEW_ROWS) -> dg.MetadataValue:
    """The first ``rows`` rows of ``df`` (in its order) as a ``MetadataValue.md`` table."""
    sample = df.limit(rows).collect()
    header = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    body = ["| " + " | ".join(_cell(v) for v in r) + " |" for r in sample]
    text = "\n".join([header, rule, *body])
    return dg.MetadataValue.md(text if sample else text + "\n\n_(no rows)_")


def _cell(value) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")[:60]
