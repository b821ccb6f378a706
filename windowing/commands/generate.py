"""``rewindow generate``: write a sample event history (Parquet, one folder per day;
:mod:`windowing.sample`)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from typing import Any

NAME = "generate"


def add_parser(subparsers: Any) -> None:
    g = subparsers.add_parser(NAME, help="write sample event history (Parquet)")
    g.add_argument("--output", required=True)
    g.add_argument("--start", default="2024-01-01")
    g.add_argument("--days", type=int, default=2)
    g.add_argument("--events-per-day", type=int, default=50_000)
    g.add_argument("--keys", type=int, default=1_000)
    g.add_argument("--seed", type=int, default=7)


def run(args: argparse.Namespace) -> int:
    from windowing.sample import generate_history  # noqa: PLC0415 - keeps the CLI fast: sample imports pyspark

    start = datetime.strptime(args.start, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    folders = generate_history(args.output, start, args.days, args.events_per_day, args.keys, seed=args.seed)
    print(json.dumps({"days": [str(f) for f in folders]}, indent=2))
    return 0
