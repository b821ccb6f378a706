"""How the event history is cut into partitions: by arrival time, daily or hourly, in UTC.

| variable | meaning | default |
|---|---|---|
| ``REWINDOW_PARTITION_GRAIN`` | ``daily`` or ``hourly`` | ``daily`` |
| ``REWINDOW_HISTORY_START`` | first partition (``YYYY-MM-DD``); the replay starts there, from no state | ``2024-01-01`` |
| ``REWINDOW_HISTORY_END`` | optional end, exclusive (``YYYY-MM-DD``); without it partitions run up to the last complete one | none |

These decide the shape of the asset graph, so they are read when the definitions are
built (``build_definitions()``), never at import time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date

import dagster as dg

GRAINS = ("daily", "hourly")
DEFAULT_GRAIN = "daily"
DEFAULT_HISTORY_START = "2024-01-01"


@dataclass(frozen=True)
class PartitionSettings:
    grain: str = DEFAULT_GRAIN
    start: str = DEFAULT_HISTORY_START
    end: str | None = None

    def __post_init__(self) -> None:
        if self.grain not in GRAINS:
            raise ValueError(f"REWINDOW_PARTITION_GRAIN: {self.grain!r} is not one of {', '.join(GRAINS)}")
        for name, value in (("REWINDOW_HISTORY_START", self.start), ("REWINDOW_HISTORY_END", self.end)):
            if value is not None:
                try:
                    date.fromisoformat(value)
                except ValueError:
                    raise ValueError(f"{name}: {value!r} is not a date (YYYY-MM-DD)") from None

    @classmethod
    def from_env(cls) -> "PartitionSettings":
        return cls(
            grain=os.environ.get("REWINDOW_PARTITION_GRAIN", DEFAULT_GRAIN).strip().lower(),
            start=os.environ.get("REWINDOW_HISTORY_START", DEFAULT_HISTORY_START).strip(),
            end=(os.environ.get("REWINDOW_HISTORY_END") or "").strip() or None,
        )

    def partitions_def(self) -> dg.TimeWindowPartitionsDefinition:
        """Daily partitions keyed ``YYYY-MM-DD`` or hourly ones keyed ``YYYY-MM-DD-HH:MM``, UTC."""
        if self.grain == "hourly":
            return dg.HourlyPartitionsDefinition(
                start_date=f"{self.start}-00:00",
                end_date=f"{self.end}-00:00" if self.end else None,
                timezone="UTC",
            )
        return dg.DailyPartitionsDefinition(start_date=self.start, end_date=self.end, timezone="UTC")
