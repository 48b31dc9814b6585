"""Grafana's units, as its value formatters write them, for axis ticks and stat values.

The units the chart's dashboards use (``short``, ``s``, ``ops``, ``reqps``, ``percentunit``) and
their near kin (``ms``, ``percent``, ``bytes``, ``decbytes``, ``none``). A unit this module does not
know is written after the number, as Grafana writes a custom unit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

# Grafana's "short": a count scaled by thousands with its own suffixes.
_SHORT = ("", " K", " Mil", " Bil", " Tri", " Quadr", " Quint", " Sext", " Sept")
# Grafana's simpleCountUnit: K/M/B/T, then the unit's symbol after a space.
_COUNT = ("", "K", "M", "B", "T")
_COUNT_SYMBOLS = {"ops": "ops", "reqps": "req/s", "rps": "rd/s", "wps": "wr/s", "iops": "io/s", "cps": "c/s"}
_IEC = (" B", " KiB", " MiB", " GiB", " TiB", " PiB")
_SI_BYTES = (" B", " kB", " MB", " GB", " TB", " PB")
# toSeconds' steps: (below this many seconds, divide by, suffix).
_SECONDS = ((1e-6, 1e-9, " ns"), (1e-3, 1e-6, " µs"), (1.0, 1e-3, " ms"), (60.0, 1.0, " s"),
            (3600.0, 60.0, " min"), (86400.0, 3600.0, " hour"), (604800.0, 86400.0, " day"),
            (31536000.0, 604800.0, " week"))


def fixed(value: float, decimals: int | None = None) -> str:
    """A number as Grafana writes it: ``decimals`` places, or by default three significant digits
    (at most four decimals) with trailing zeros dropped; never ``-0``."""
    if decimals is None:
        magnitude = math.floor(math.log10(abs(value))) if value else 0
        decimals = min(4, max(0, 2 - magnitude))
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def scaled(value: float, factor: float, suffixes: Sequence[str], decimals: int | None = None) -> str:
    """``value`` divided by ``factor`` until it is below ``factor``, with that step's suffix."""
    step = 0
    while abs(value) >= factor and step < len(suffixes) - 1:
        value /= factor
        step += 1
    if abs(float(fixed(value, decimals))) >= factor and step < len(suffixes) - 1:  # 999.96 K is 1 Mil
        value /= factor
        step += 1
    return fixed(value, decimals) + suffixes[step]


def seconds(value: float, decimals: int | None = None, base: float = 1.0) -> str:
    """Grafana's ``s`` (``base`` 1) and ``ms`` (``base`` 0.001): the largest time unit below it."""
    size = value * base
    if size == 0:
        return fixed(value, decimals) + (" s" if base == 1.0 else " ms")
    for limit, divisor, suffix in _SECONDS:
        if abs(size) < limit:
            return fixed(size / divisor, decimals) + suffix
    return fixed(size / 31536000.0, decimals) + " year"


def _count(symbol: str) -> Callable[[float, int | None], str]:
    return lambda value, decimals: scaled(value, 1000.0, [f"{s} {symbol}" for s in _COUNT], decimals)


_FORMATTERS: dict[str, Callable[[float, int | None], str]] = {
    "short": lambda v, d: scaled(v, 1000.0, _SHORT, d),
    "none": fixed,
    "s": seconds,
    "ms": lambda v, d: seconds(v, d, base=0.001),
    "percentunit": lambda v, d: fixed(v * 100.0, d) + "%",
    "percent": lambda v, d: fixed(v, d) + "%",
    "bytes": lambda v, d: scaled(v, 1024.0, _IEC, d),
    "decbytes": lambda v, d: scaled(v, 1000.0, _SI_BYTES, d),
    **{unit: _count(symbol) for unit, symbol in _COUNT_SYMBOLS.items()},
}


def known(unit: str) -> bool:
    return unit in _FORMATTERS


def format_value(value: float, unit: str = "short", decimals: int | None = None) -> str:
    """``value`` in Grafana's ``unit``: ``format_value(0.25, "s") == "250 ms"``,
    ``format_value(0.5, "percentunit") == "50%"``, ``format_value(2500, "reqps") == "2.5K req/s"``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    formatter = _FORMATTERS.get(unit)
    if formatter is None:
        return f"{fixed(value, decimals)} {unit}".rstrip()
    return formatter(value, decimals)
