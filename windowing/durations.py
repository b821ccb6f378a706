"""Duration parsing: ``500ms``, ``5s``, ``5m``, ``1h``, ``1d`` and ISO-8601 (``PT5M``).

Every duration inside the engine is an integer number of milliseconds.
"""

from __future__ import annotations

import re

DAY_MS = 86_400_000
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": DAY_MS}
_SHORT = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_ISO = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,3})?)S)?)?$"
)


def parse_duration_ms(value: object, field: str) -> int:
    """Parse a duration into integer milliseconds.

    Accepts ``<integer><unit>`` with unit in ms, s, m, h, d, or an ISO-8601
    duration of days/hours/minutes/seconds (``PT1H30M``, ``P1D``, ``PT0.5S``).
    A bare integer is refused: its unit would be a guess.

    Raises ValueError naming ``field`` and the bad value.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(
            f"{field}: {value!r} is not a duration; write it like 500ms, 5s, 5m, 1h, 1d or PT5M"
        )
    m = _SHORT.match(value)
    if m:
        return int(m.group(1)) * _UNIT_MS[m.group(2)]
    iso = _ISO.match(value.strip().upper())
    if iso and any(iso.group(g) for g in "dhms"):
        d, h, mi = (int(iso.group(g) or 0) for g in "dhm")
        s = iso.group("s") or "0"
        whole, _, frac = s.partition(".")
        ms = int(whole) * 1000 + int((frac + "000")[:3])
        return ((d * 24 + h) * 60 + mi) * 60_000 + ms
    raise ValueError(
        f"{field}: {value!r} is not a duration; write it like 500ms, 5s, 5m, 1h, 1d or PT5M"
    )
