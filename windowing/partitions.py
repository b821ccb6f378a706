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
        return f"{day_key(t)}-{t:%H:%M}" if self.grain == "hour" else day_key(t)

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


def day_key(t: datetime | date) -> str:
    """``YYYY-MM-DD`` of ``t``, the year always four digits: ``strftime("%Y")`` gives
    ``1-01-01`` for year 1 on glibc, which ``strptime`` then refuses."""
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}"


#: The first year a partition may be in (:func:`check_bound`).
MIN_YEAR = 1000


def _bound_hours(text: str, last: bool) -> tuple[str, int]:
    """The day of a bound :func:`check_bound` passed, and its hour (a day alone: its first
    hour, or its last as the end of a range)."""
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})(?:[T -](\d{2})(?::\d{2})?)?", text.strip())
    assert m is not None, text
    return m[1], int(m[2]) if m[2] else (23 if last else 0)


def check_range(first: str | None, last: str | None) -> None:
    """Refuse ``--to`` before ``--from`` (both passed by :func:`check_bound`), before Spark starts."""
    if first and last and _bound_hours(last, last=True) < _bound_hours(first, last=False):
        raise ValueError(f"--to {last} is before --from {first}")


def check_bound(text: str, option: str, grain_option: bool = True) -> None:
    """Refuse a ``--from``/``--to``-style bound that is neither a day nor an hour
    (``YYYY-MM-DD``, ``YYYY-MM-DDTHH``, ``YYYY-MM-DD-HH:MM``), or not a real one (``2024-02-30``),
    naming the option: before Spark starts, not after the landing zone is listed. A day
    before :data:`MIN_YEAR` is refused too. ``grain_option``: the command has ``--grain``
    (``backfill``), which an hour needs."""
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})(?:[T -](\d{2})(?::(\d{2}))?)?", text.strip())
    try:
        if m is None:
            raise ValueError
        datetime.strptime(m[1], "%Y-%m-%d")
        if int(m[2] or 0) > 23 or int(m[3] or 0) > 59:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"{option} {text!r}: not a day (YYYY-MM-DD) or an hour (YYYY-MM-DDTHH"
            + (", with --grain hour)" if grain_option else ")")
        ) from None
    if int(m[1][:4]) < MIN_YEAR:
        raise ValueError(
            f"{option} {text}: partitions before the year {MIN_YEAR} cannot be replayed: Spark's date literals "
            "(java.sql.Date) need a four-digit year, which pyspark does not write for years before 1000"
        )


def utc(t: datetime | date) -> datetime:
    if not isinstance(t, datetime):
        t = datetime(t.year, t.month, t.day)
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
