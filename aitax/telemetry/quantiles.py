"""Which latency quantiles to report and when a sample is big enough for one. Standard library only: the
command line imports it to build its options."""

from __future__ import annotations

import math

DEFAULT_QUANTILES = (0.5, 0.9, 0.99, 0.999)


def min_samples(quantile: float) -> int:
    """Samples a quantile needs before it means anything: at least 10 beyond it (10 / (1 - q))."""
    return math.ceil(10 / (1 - quantile) - 1e-9)


def window_for(quantile: float, faces_per_s: float) -> float:
    """Seconds a window at `faces_per_s` takes to hold the samples `quantile` needs, with a tenth to spare (a
    latency-bound search's probe runs at least this long)."""
    return min_samples(quantile) / faces_per_s * 1.1


def quantile_key(quantile: float) -> str:
    """0.999 -> "p99.9": how quantiles are named in results and tables."""
    return f"p{quantile * 100:g}"


def parse_quantiles(text: str) -> tuple[float, ...]:
    """"0.5,0.99,0.999" -> quantiles in (0, 1), ascending; ValueError naming a bad one."""
    values = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a number") from None
        if not 0 < value < 1:
            raise ValueError(f"{part}: a quantile is between 0 and 1 (0.999 for p99.9)")
        values.append(value)
    if not values:
        raise ValueError("no quantiles given")
    return tuple(sorted(set(values)))


def parse_duration_ms(text: str) -> float:
    """"500ms", "0.5s" or "500" (ms) -> 500.0; ValueError naming what is wrong."""
    number, scale = text.strip().lower(), 1.0
    for suffix, multiplier in (("ms", 1.0), ("s", 1000.0)):
        if number.endswith(suffix):
            number, scale = number[: -len(suffix)], multiplier
            break
    try:
        value = float(number) * scale
    except ValueError:
        raise ValueError(f"{text!r}: expected a duration such as 500ms or 0.5s") from None
    if value <= 0:
        raise ValueError(f"{text!r}: must be > 0")
    return value
