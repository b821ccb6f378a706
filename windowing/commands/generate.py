"""``rewindow generate``: write a sample event history (Parquet, one folder per day;
:mod:`windowing.sample`)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from typing import Any

from windowing.command_line import positive_int

NAME = "generate"


def add_parser(subparsers: Any) -> None:
    g = subparsers.add_parser(NAME, help="write sample event history (Parquet)")
    g.add_argument("--output", required=True, help="folder to write into (a date=YYYY-MM-DD folder a day)")
    g.add_argument("--start", type=_day, default="2024-01-01", help="first day, YYYY-MM-DD (default %(default)s)")
    g.add_argument("--days", type=positive_int, default=2, help="days of history (default %(default)s)")
    g.add_argument("--events-per-day", type=positive_int, default=50_000, help="default %(default)s")
    g.add_argument("--keys", type=positive_int, default=1_000, help="distinct user_id values (default %(default)s)")
    g.add_argument("--seed", type=int, default=7, help="random seed (default %(default)s)")


def _day(text: str) -> datetime:
    """``--start``: a UTC day, refused by argparse unless ``YYYY-MM-DD``."""
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a day as YYYY-MM-DD, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    from windowing.sample import generate_history  # noqa: PLC0415 - keeps the CLI fast: sample imports pyspark

    folders = generate_history(args.output, args.start, args.days, args.events_per_day, args.keys, seed=args.seed)
    print(json.dumps({"days": [str(f) for f in folders]}, indent=2))
    return 0
