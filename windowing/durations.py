"""Duration parsing: ``500ms``, ``5s``, ``5m``, ``1h``, ``1d`` and ISO-8601 (``PT5M``).

Every duration inside the engine is an integer number of milliseconds.

Range: ``0 <= duration <= MAX_DURATION_MS``, 100 Julian years (36 525 days,
3 155 760 000 000 ms), the bound included. Longer values are refused when the
configuration is read, naming the field and the value, instead of failing later in the
replay (``999999999999999d`` used to load, then overflow int64 window arithmetic).
Why this bound is safe: the engine adds a handful of durations to a time (window end
= start + span, with offset; watermark - delay; session end + gap; start + maximum
duration). Every time Python's ``datetime`` can hold (years 1 to 9999, within about
2.6e14 ms of the epoch) plus or minus several such durations stays far inside int64
epoch milliseconds (9.2e18) and Spark's int64 epoch microseconds (9.2e15 ms). A row
whose windows would still leave years 1..9999 is rejected (``window out of range``),
and an effective watermark before year 1 is written as null (docs/semantics.md section 1),
so every output time is a ``datetime``. No real window, delay or timeout comes near it.
"""

from __future__ import annotations

import re

DAY_MS = 86_400_000
#: The longest accepted duration: 100 Julian years (see the module docstring).
MAX_DURATION_MS = 36_525 * DAY_MS
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": DAY_MS}
#: More digits than this is out of range whatever the unit (and int() refuses very long strings).
_MAX_DIGITS = 20
_SHORT = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_ISO = re.compile(r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,3})?)S)?)?$")


def parse_duration_ms(value: object, field: str) -> int:
    """Parse a duration into integer milliseconds.

    Accepts ``<integer><unit>`` with unit in ms, s, m, h, d, or an ISO-8601
    duration of days/hours/minutes/seconds (``PT1H30M``, ``P1D``, ``PT0.5S``).
    A bare integer is refused: its unit would be a guess. The result is in
    ``[0, MAX_DURATION_MS]``; a longer duration is refused.

    Raises ValueError naming ``field`` and the bad value.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"{field}: {value!r} is not a duration; write it like 500ms, 5s, 5m, 1h, 1d or PT5M")
    m = _SHORT.match(value)
    if m:
        return _in_range(_int(m.group(1)) * _UNIT_MS[m.group(2)], value, field)
    iso = _ISO.match(value.strip().upper())
    if iso and any(iso.group(g) for g in "dhms"):
        d, h, mi = (_int(iso.group(g) or "0") for g in "dhm")
        s = iso.group("s") or "0"
        whole, _, frac = s.partition(".")
        ms = _int(whole) * 1000 + int((frac + "000")[:3])
        return _in_range(((d * 24 + h) * 60 + mi) * 60_000 + ms, value, field)
    raise ValueError(f"{field}: {value!r} is not a duration; write it like 500ms, 5s, 5m, 1h, 1d or PT5M")


def format_duration_ms(ms: int) -> str:
    """``ms`` in the largest unit that divides it exactly: ``3597s``, ``59m``, ``0ms``."""
    for unit in ("d", "h", "m", "s"):
        if ms and ms % _UNIT_MS[unit] == 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


def _int(digits: str) -> int:
    digits = digits.lstrip("0") or "0"
    # Beyond _MAX_DIGITS any value is out of range; stand in a value that still is.
    return int(digits) if len(digits) <= _MAX_DIGITS else 10**_MAX_DIGITS


def _in_range(ms: int, value: str, field: str) -> int:
    if ms > MAX_DURATION_MS:
        shown = value if len(value) <= 60 else f"{value[:40]}...{value[-10:]}"
        raise ValueError(
            f"{field}: {shown!r} is out of range; a duration may be at most 100 years "
            f"({MAX_DURATION_MS // DAY_MS}d, {MAX_DURATION_MS} ms)"
        )
    return ms


def human_duration(ms: int | None) -> str:
    """``7891669`` -> ``2h 11m 31.669s``; whole units as ``format_duration_ms`` writes them."""
    if ms is None:
        return "-"
    ms = int(ms)
    if ms == 0 or format_duration_ms(ms)[-2:] != "ms" or ms < 1000:
        return format_duration_ms(ms)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    sec = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    return " ".join(p for p in (f"{h}h" if h else "", f"{m}m" if m else "", f"{sec}s" if rest else "") if p)
