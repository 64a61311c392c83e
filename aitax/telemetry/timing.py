"""Where a stage's time goes: named sub-step timers (the paper's Fig. 8), cheap enough for every frame."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Stopwatch:
    """Accumulates milliseconds per named sub-step; `other` is whatever the named ones do not cover."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    @contextmanager
    def time(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, (time.perf_counter() - started) * 1000)

    def add(self, name: str, ms: float) -> None:
        self.ms[name] = self.ms.get(name, 0.0) + ms

    def with_other(self, total_ms: float) -> dict[str, float]:
        """The sub-steps plus `other` = total - named, rounded for the event (never negative)."""
        named = sum(self.ms.values())
        return {**{k: round(v, 3) for k, v in self.ms.items()}, "other": round(max(0.0, total_ms - named), 3)}
