"""Numbers and times as people read them in a report (formatting only, no statistics)."""

from __future__ import annotations

import math
import time


def is_missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def sig(value: float | None, digits: int = 3) -> str:
    """A number to `digits` significant figures, without scientific notation for usual sizes."""
    if is_missing(value):
        return "n/a"
    assert value is not None
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:,.{decimals}f}"
    return text


def ms(value: float | None) -> str:
    return "n/a" if is_missing(value) else f"{sig(value)} ms"


def rate(value: float | None) -> str:
    return "n/a" if is_missing(value) else f"{sig(value)} req/s"


def pct(value: float | None, digits: int = 2) -> str:
    """A percentage given in 0..100."""
    if is_missing(value):
        return "n/a"
    assert value is not None
    if value != 0 and abs(value) < 0.01:
        return f"{value:.1g} %"
    return f"{value:.{digits}f} %"


def fraction_pct(value: float | None) -> str:
    """A fraction given in 0..1, shown as a percentage."""
    return "n/a" if is_missing(value) else f"{100.0 * float(value or 0.0):.0f} %"


def count(value: int | float | None) -> str:
    return "n/a" if is_missing(value) else f"{int(value or 0):,}"


def seconds(value: float | None) -> str:
    """A duration: `850 ms`, `6.2 s`, `4 min 10 s`, `1 h 02 min`."""
    if is_missing(value):
        return "n/a"
    assert value is not None
    if abs(value) < 1:
        return f"{value * 1000:.0f} ms"
    if abs(value) < 60:
        return f"{sig(value, 2)} s"
    total = int(round(value))
    h, rem = divmod(total, 3600)
    m, s = divmod(rem, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s"


def clock(value_s: float | None) -> str:
    """A position on the timeline (seconds since run start) as m:ss or h:mm:ss."""
    if is_missing(value_s):
        return "n/a"
    assert value_s is not None
    total = int(round(value_s))
    sign = "-" if total < 0 else ""
    h, rem = divmod(abs(total), 3600)
    m, s = divmod(rem, 60)
    return f"{sign}{h}:{m:02d}:{s:02d}" if h else f"{sign}{m}:{s:02d}"


def utc(t_ns: int | None) -> str:
    """A wall-clock timestamp from the run (never the time of rendering)."""
    if t_ns is None:
        return "n/a"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t_ns / 1e9))


def size_bytes(value: float | None) -> str:
    if is_missing(value):
        return "n/a"
    assert value is not None
    step = 1024.0
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < step or unit == "TiB":
            return f"{sig(value, 3)} {unit}"
        value /= step
    return f"{value} B"  # pragma: no cover


def with_unit(value: float | None, unit: str) -> str:
    """An evidence value with its unit, as the analysis named it."""
    if is_missing(value):
        return "n/a"
    if unit in ("ms",):
        return ms(value)
    if unit in ("%", "pct"):
        return pct(value)
    if unit in ("fraction", "ratio01"):
        return fraction_pct(value)
    if unit == "s":
        return seconds(value)
    if unit in ("bytes", "B"):
        return size_bytes(value)
    if unit in ("", "count", "x"):
        return sig(value) + ("×" if unit == "x" else "")
    return f"{sig(value)} {unit}"


def p_value(value: float | None) -> str:
    if is_missing(value):
        return "n/a"
    assert value is not None
    return "< 0.0001" if value < 1e-4 else f"{value:.2g}"
