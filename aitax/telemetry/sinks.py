"""Where events go. Stage code sees only `EventSink.emit`; the sink decides how (and never blocks a stage)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import IO, Protocol

from aitax.common.errors import UserError
from aitax.telemetry.events import Event


class EventSink(Protocol):
    enabled: bool  # False: events go nowhere, so a stage may skip building them (hot paths of the emulator)

    def emit(self, event: Event) -> None: ...

    def close(self) -> None: ...


class NullSink:
    enabled = False

    def emit(self, event: Event) -> None:
        pass

    def close(self) -> None:
        pass


class JsonlSink:
    """One JSON document per line, appended; each process writes its own file (appends never interleave)."""

    enabled = True

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


class TeeSink:
    """The same events to several sinks (a JSONL file for `aitax evaluate`, Elasticsearch for Kibana)."""

    enabled = True

    def __init__(self, sinks: list[EventSink]) -> None:
        self.sinks = sinks

    def emit(self, event: Event) -> None:
        for sink in self.sinks:
            sink.emit(event)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def open_sink(spec: str, process_name: str) -> EventSink:
    """`none`, `file:DIR` (DIR/<process_name>.jsonl), `es:URL` (spooling to .aitax/spool when it is down),
    or several joined by commas."""
    from aitax.common.paths import aitax_home

    sinks: list[EventSink] = []
    for part in filter(None, spec.split(",")):
        if part == "none":
            continue
        if part.startswith("file:"):
            sinks.append(JsonlSink(Path(part.removeprefix("file:")) / f"{process_name}.jsonl"))
        elif part.startswith("es:"):
            from aitax.telemetry.elastic import ElasticsearchSink

            sinks.append(ElasticsearchSink(part.removeprefix("es:"), aitax_home() / "spool" / f"{process_name}.jsonl"))
        else:
            raise UserError(f"--events {spec!r}: expected none, file:DIR, es:URL, or several joined by commas")
    if not sinks:
        return NullSink()
    return sinks[0] if len(sinks) == 1 else TeeSink(sinks)
