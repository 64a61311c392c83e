"""Where a report's events come from: a run's JSONL files, or the `aitax-events-*` indices in Elasticsearch."""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from aitax.common.errors import UserError
from aitax.telemetry.events import INDEX_PREFIX, Event

# Fields every event has: a line without them is not an event.
REQUIRED_FIELDS = tuple(f.name for f in fields(Event) if f.default is MISSING and f.default_factory is MISSING)
SCROLL_PAGE = 5000


@dataclass(frozen=True)
class LoadedEvents:
    run_id: str
    source: str
    documents: list[dict[str, Any]]  # sorted by wall_start_ns
    malformed_lines: int  # JSONL lines skipped (in any run's events: a bad line names no run)


def load_events(run_id: str, source: str | Path) -> LoadedEvents:
    """All events of `run_id` from a JSONL folder or file, or from an Elasticsearch URL."""
    source = str(source)
    if source.startswith(("http://", "https://")):
        documents, malformed = _from_elasticsearch(run_id, source), 0
    else:
        documents, malformed = _from_jsonl(run_id, Path(source))
    if not documents:
        raise UserError(f"run {run_id!r}: no events in {source}")
    documents.sort(key=lambda d: d["wall_start_ns"])
    return LoadedEvents(run_id, source, documents, malformed)


def is_event(document: Any) -> bool:
    return (isinstance(document, dict) and all(name in document for name in REQUIRED_FIELDS)
            and isinstance(document["wall_start_ns"], int) and isinstance(document["wall_end_ns"], int))


def _from_jsonl(run_id: str, path: Path) -> tuple[list[dict[str, Any]], int]:
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
    elif path.is_file():
        files = [path]
    else:
        raise UserError(f"--events {path}: no such file or folder")
    documents, malformed = [], 0
    for file in files:
        # Undecodable bytes become U+FFFD: the line then fails to parse and is counted, not fatal.
        with open(file, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if not line.strip():
                    continue
                try:
                    document = json.loads(line)
                except json.JSONDecodeError:
                    document = None
                if not is_event(document):
                    malformed += 1  # e.g. the last line of a process killed mid-write
                elif document["run_id"] == run_id:  # a folder may also hold late faces of an earlier run
                    documents.append(document)
    return documents, malformed


def _from_elasticsearch(run_id: str, url: str) -> list[dict[str, Any]]:
    from elasticsearch import ApiError, ConnectionError, TransportError, helpers

    from aitax.telemetry.elastic_access import client as elasticsearch_client
    from aitax.telemetry.elastic_access import redacted, refusal

    client = elasticsearch_client(url, request_timeout=60)
    try:
        client.info()  # one quick question first: an unreachable URL is one line, not a scroll's retries
    except ConnectionError:
        client.close()
        raise UserError(f"run {run_id!r}: Elasticsearch at {redacted(url)} unreachable (the local stack's starts with "
                        "`aitax stack up`; or pass --events DIR)") from None
    except ApiError as error:
        client.close()
        raise UserError(f"run {run_id!r}: {refusal(url, error.meta.status) or error}") from None
    try:
        # A scroll over every matching document; sorted locally, since a sorted scroll costs the cluster more.
        hits = helpers.scan(client, index=f"{INDEX_PREFIX}-*", query={"query": {"term": {"run_id": run_id}}},
                            size=SCROLL_PAGE, scroll="2m")
        return [hit["_source"] for hit in hits]
    except (ApiError, TransportError) as error:
        status = error.meta.status if isinstance(error, ApiError) else None
        reason = refusal(url, status) or f"cannot read events from Elasticsearch at {redacted(url)}: {error}"
        raise UserError(f"run {run_id!r}: {reason}") from error
    finally:
        client.close()
