"""An event sink that keeps what it is given, for tests that look at the events a stage emits."""

from __future__ import annotations

from aitax.telemetry.events import Event


class RecordingSink:
    enabled = True

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass
