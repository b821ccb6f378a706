"""What every part of the configuration shares: :class:`ConfigError` and the small helpers
that read one YAML field (a mapping, a column name, a duration, a window offset, an enum
member, a share) and name the field in their message when it is wrong.

At the bottom of the package's imports: it imports none of the package's modules.
"""

from __future__ import annotations

import difflib
import re
from enum import Enum
from typing import Any, Collection, Iterable, Literal, Mapping, TypeVar, overload

from windowing.durations import format_duration_ms, parse_duration_ms


class ConfigError(ValueError):
    """A pipeline configuration is invalid. The message names the field."""


_E = TypeVar("_E", bound=Enum)


def expect_mapping(v: Any, f: str) -> Mapping[str, Any]:
    """Field ``f`` holding ``v``, which must be a mapping."""
    if not isinstance(v, Mapping):
        raise ConfigError(f"{f}: expected a mapping, got {v!r}")
    return v


def refuse_unknown(m: Mapping[str, Any], f: str, allowed: Collection[str]) -> None:
    """Refuse a key of mapping ``m`` (field ``f``) that is not ``allowed``, naming the nearest."""
    for k in m:
        if k not in allowed:
            where = k if f == "<root>" else f"{f}.{k}"
            near = close_matches(str(k), allowed)
            raise ConfigError(
                f"{where}: unknown field"
                + (f" (did you mean {near[0]}?)" if near else "")
                + f"; expected one of {', '.join(sorted(allowed))}"
            )


@overload
def column_field(v: Any, f: str, required: Literal[True]) -> str: ...
@overload
def column_field(v: Any, f: str, required: bool = False) -> str | None: ...
def column_field(v: Any, f: str, required: bool = False) -> str | None:
    """A column name (stripped); None when the field is absent and not ``required``."""
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{f}: {v!r} must be a column name")
    return v.strip()


def duration_field(v: Any, f: str) -> int:
    """A duration (``500ms``, ``5m``, ``PT1H``) in milliseconds."""
    try:
        return parse_duration_ms(v, f)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def positive_duration_field(v: Any, f: str) -> int:
    """A duration longer than zero, in milliseconds."""
    ms = duration_field(v, f)
    if ms <= 0:
        raise ConfigError(f"{f}: {v!r} must be longer than zero")
    return ms


def enum_field(enum: type[_E], v: Any, f: str) -> _E:
    """The member of ``enum`` whose value ``v`` is (case ignored)."""
    if isinstance(v, str):
        for member in enum:
            if member.value.upper() == v.strip().upper():
                return member
    raise ConfigError(f"{f}: {v!r} is not one of {', '.join(m.value for m in enum)}")


def window_offset_field(v: Any, span_ms: int, period_ms: int, span_text: Any, f: str) -> int:
    """``windowOffset`` in ``[0, windowSpan)``.

    Offsets O and O + period (the span for tumbling windows, the slide for sliding ones)
    give the same windows, so a negative offset or one of a whole span or more is
    refused rather than silently reduced; the message names the equivalent offset.
    """
    rule = f"an offset must satisfy 0 <= windowOffset < windowSpan ({span_text!r})"
    text = v.strip() if isinstance(v, str) else None
    if text and text.startswith("-"):
        try:
            ms = -parse_duration_ms(text[1:], f)
        except ValueError:
            raise ConfigError(f"{f}: {v!r} is negative; {rule}") from None
        raise ConfigError(
            f"{f}: {v!r} is negative; {rule}; {format_duration_ms(ms % period_ms)} gives the same windows"
        )
    ms = duration_field(v, f)
    if ms >= span_ms:
        raise ConfigError(
            f"{f}: {v!r} is not shorter than windowSpan {span_text!r}; {rule} "
            f"(it gives the same windows as {format_duration_ms(ms % period_ms)})"
        )
    return ms


def parse_share(v: Any, f: str) -> float:
    """A share of rows: a number from 0 to 1 (``0.001``) or a percentage (``"0.1%"``)."""
    text = v.strip() if isinstance(v, str) else v
    try:
        if isinstance(text, str) and text.endswith("%"):
            share = float(text[:-1].strip()) / 100
        elif isinstance(text, bool) or not isinstance(text, (int, float)):
            raise ValueError
        else:
            share = float(text)
    except ValueError:
        raise ConfigError(
            f"{f}: {v!r} is not a share; use a number from 0 to 1 (0.001) or a percentage (0.1%)"
        ) from None
    if not 0 <= share <= 1 or share != share:
        raise ConfigError(f"{f}: {v!r} is not between 0 and 1 (0% and 100%)")
    return share


def nearest_name(name: str, candidates: list[str]) -> str | None:
    """The candidate ``name`` most likely means: equal ignoring case and separators
    (``userId`` / ``user_id``), else a close spelling."""

    def bare(s: str) -> str:
        return re.sub(r"[^0-9a-z]", "", s.lower())

    same = [c for c in candidates if bare(c) == bare(name)]
    if same:
        return same[0]
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.8)
    return close[0] if close else None


def close_matches(name: str, allowed: Iterable[str]) -> list[str]:
    """Allowed field names ``name`` is a near miss of (case ignored)."""
    lower = {a.lower(): a for a in allowed}
    return [lower[m] for m in difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.75)]
