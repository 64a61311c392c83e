"""Where events go. Stage code sees only `EventSink.emit`; the sink decides how (and never blocks a stage)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import IO, Protocol

from aitax.errors import UserError
from telemetry.events import Event


class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...

    def close(self) -> None: ...


class NullSink:
    def emit(self, event: Event) -> None:
        pass

    def close(self) -> None:
        pass


class JsonlSink:
    """One JSON document per line, appended; each process writes its own file (appends never interleave)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = open(path, "a", buffering=1 << 16)  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        line = json.dumps(event.to_document(), separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def open_sink(spec: str, process_name: str) -> EventSink:
    """`none`, or `file:DIR` (writes DIR/<process_name>.jsonl)."""
    if spec == "none":
        return NullSink()
    if spec.startswith("file:"):
        return JsonlSink(Path(spec.removeprefix("file:")) / f"{process_name}.jsonl")
    raise UserError(f"--events {spec!r}: expected `none` or `file:DIR`")
