"""Arrival-time partitions of a history: their keys (Dagster's), bounds and order.

:class:`Partitions` is what the chain (:mod:`windowing.chain`), ``rewindow backfill``,
the Dagster assets and the Airflow operator agree on: partition ``2024-01-01`` of a day
history or ``2024-01-01-05:00`` of an hour history is the same partition everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

#: The length of a partition of each grain.
GRAIN_STEPS = {"day": timedelta(days=1), "hour": timedelta(hours=1)}


@dataclass(frozen=True)
class Partitions:
    """Arrival-time partitions of a history: ``grain`` (``day`` or ``hour``) from ``start``
    (the first partition of the history, which starts from no state), in UTC.

    Keys are Dagster's: ``2024-01-01`` for days, ``2024-01-01-05:00`` for hours, so that
    a history written by ``rewindow backfill``, Airflow and Dagster is the same store.
    """

    grain: str
    start: datetime

    def __post_init__(self) -> None:
        if self.grain not in GRAIN_STEPS:
            raise ValueError(f"grain: {self.grain!r} is not one of {', '.join(GRAIN_STEPS)}")
        start = utc(self.start)
        if start != self._floor(start):
            article = "an" if self.grain == "hour" else "a"
            raise ValueError(f"history start {start.isoformat()} is not the start of {article} {self.grain}")
        object.__setattr__(self, "start", start)

    @property
    def step(self) -> timedelta:
        return GRAIN_STEPS[self.grain]

    def _floor(self, t: datetime) -> datetime:
        t = utc(t)
        return (
            t.replace(minute=0, second=0, microsecond=0)
            if self.grain == "hour"
            else t.replace(hour=0, minute=0, second=0, microsecond=0)
        )

    def key_of(self, t: datetime) -> str:
        """The key of the partition holding arrival time ``t``."""
        t = self._floor(t)
        return f"{t:%Y-%m-%d-%H:%M}" if self.grain == "hour" else f"{t:%Y-%m-%d}"

    def start_of(self, key: str) -> datetime:
        """The start of partition ``key`` (refuses keys of another grain)."""
        fmt = "%Y-%m-%d-%H:%M" if self.grain == "hour" else "%Y-%m-%d"
        try:
            t = datetime.strptime(key, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            raise ValueError(
                f"partition {key!r} is not a{'n' if self.grain == 'hour' else ''} {self.grain} "
                f"key ({'YYYY-MM-DD-HH:00' if self.grain == 'hour' else 'YYYY-MM-DD'})"
            ) from None
        if t != self._floor(t):
            raise ValueError(f"partition {key!r} is not the start of an hour")
        return t

    def window(self, key: str) -> tuple[datetime, datetime]:
        """``[start, end)`` of partition ``key``."""
        start = self.start_of(key)
        return start, start + self.step

    def previous(self, key: str) -> str | None:
        """The partition before ``key``; None for the first partition of the history."""
        start = self.start_of(key)
        if start < self.start:
            raise ValueError(f"partition {key} is before the start of the history ({self.key_of(self.start)})")
        return None if start == self.start else self.key_of(start - self.step)

    def keys(self, first: str | None = None, last: str | None = None) -> list[str]:
        """The keys from ``first`` (default: the start of the history) to ``last``, both included."""
        t = self.start_of(first) if first else self.start
        end = self.start_of(last) if last else t
        if t < self.start:
            raise ValueError(f"partition {first} is before the start of the history ({self.key_of(self.start)})")
        out = []
        while t <= end:
            out.append(self.key_of(t))
            t += self.step
        return out

    def span(self, first: str, last: str) -> list[str]:
        """``first``..``last`` given as dates (``YYYY-MM-DD``, a whole day of hours) or keys."""
        return self.keys(self._bound(first, end=False), self._bound(last, end=True))

    def _bound(self, text: str, end: bool) -> str:
        if self.grain == "hour" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            day = datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
            return self.key_of(day + timedelta(hours=23) if end else day)
        if self.grain == "day" and re.fullmatch(r"\d{4}-\d{2}-\d{2}[T -]\d{2}(:\d{2})?", text):
            raise ValueError(f"{text!r}: an hour, but the partitions are days (use --grain hour)")
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}(:\d{2})?", text):
            text = text.replace("T", "-") + ("" if ":" in text else ":00")
        return self.key_of(self.start_of(text))


def utc(t: datetime | date) -> datetime:
    if not isinstance(t, datetime):
        t = datetime(t.year, t.month, t.day)
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
