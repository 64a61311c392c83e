"""Events reach Elasticsearch, survive its outage through the spool, and metrics pass promtool."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from aitax.stack import elasticsearch as es_component
from aitax.stack import stack as local_stack
from aitax.stack.config import StackConfig
from aitax.telemetry.elastic import ElasticsearchSink
from aitax.telemetry.elastic_access import client as elasticsearch_client
from aitax.telemetry.events import INDEX_PREFIX, Event
from aitax.telemetry.metrics import StageMetrics

pytestmark = pytest.mark.integration


def _events(run_id: str, first: int, count: int) -> list[Event]:
    base = time.time_ns()
    return [Event(run_id=run_id, stage="detect", stream_id="cam-1", frame_index=i, wall_start_ns=base + i * 1000,
                  wall_end_ns=base + i * 1000 + 500, compute_time_ms=1.5, face_count=1,
                  substeps_ms={"pnet": 0.5, "other": 1.0}) for i in range(first, first + count)]


def _count(es: Elasticsearch, run_id: str) -> tuple[int, set[int]]:
    es.indices.refresh(index=f"{INDEX_PREFIX}-*")
    hits = es.search(index=f"{INDEX_PREFIX}-*", query={"term": {"run_id": run_id}}, size=10_000,
                     source=["frame_index"])["hits"]
    return hits["total"]["value"], {h["_source"]["frame_index"] for h in hits["hits"]}


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def test_events_round_trip_with_mapping(stack: StackConfig, unique_name: str, tmp_path: Path) -> None:
    sink = ElasticsearchSink(stack.elasticsearch_url, tmp_path / "spool.jsonl", flush_interval_s=0.2)
    for event in _events(unique_name, 0, 50):
        sink.emit(event)
    sink.close()
    es = elasticsearch_client(stack.elasticsearch_url)
    assert _count(es, unique_name) == (50, set(range(50)))
    hit = es.search(index=f"{INDEX_PREFIX}-*", query={"term": {"run_id": unique_name}}, size=1)["hits"]["hits"][0]
    mapping = es.indices.get_mapping(index=hit["_index"])[hit["_index"]]["mappings"]["properties"]
    assert mapping["substeps_ms"]["properties"]["pnet"]["type"] == "double"
    assert hit["_source"]["substeps_ms"] == {"pnet": 0.5, "other": 1.0}
    assert sink.spooled == 0


def test_outage_is_spooled_and_replayed_without_loss(stack: StackConfig, unique_name: str, tmp_path: Path) -> None:
    spool = tmp_path / "spool.jsonl"
    sink = ElasticsearchSink(stack.elasticsearch_url, spool, flush_interval_s=0.2)
    es = elasticsearch_client(stack.elasticsearch_url)
    for event in _events(unique_name, 0, 100):
        sink.emit(event)
    assert _wait_for(lambda: _count(es, unique_name)[0] == 100, 30)

    es_component.process().stop()  # Elasticsearch goes away mid-run
    try:
        for event in _events(unique_name, 100, 300):
            sink.emit(event)  # returns at once: only the background thread meets the dead connection
        assert _wait_for(lambda: sink.spooled >= 300, 30), sink.spooled
        assert spool.stat().st_size > 0
        spool.open("a").write("{not json\n")  # a damaged line is skipped and counted, never fatal
    finally:
        local_stack.up(stack, progress=lambda _: None)  # Elasticsearch returns
    assert _wait_for(lambda: sink.replayed >= 300, 60), (sink.replayed, sink.spooled)
    sink.close()
    count, frames = _count(es, unique_name)
    assert count == 400 and frames == set(range(400)), (count, len(frames))
    assert sink.malformed_spool_lines == 1
    assert not spool.exists(), "an empty spool is removed at close"


def test_a_dead_processs_spool_is_adopted(stack: StackConfig, unique_name: str, tmp_path: Path) -> None:
    """A process that ended while Elasticsearch was away left a spool; the next live sink replays it."""
    import json

    orphan = tmp_path / "identify-12345.jsonl"
    orphan.write_text("".join(json.dumps(e.to_document()) + "\n" for e in _events(unique_name, 0, 25)))
    sink = ElasticsearchSink(stack.elasticsearch_url, tmp_path / "detect-999.jsonl", flush_interval_s=0.2)
    es = elasticsearch_client(stack.elasticsearch_url)
    try:
        assert _wait_for(lambda: sink.adopted == 25, 30), sink.adopted
    finally:
        sink.close()
    assert _count(es, unique_name) == (25, set(range(25)))
    assert not orphan.exists()


def test_metrics_pass_promtool(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    metrics = StageMetrics("identify")
    for event in _events("r", 0, 5):
        metrics.observe(event)
    metrics.dead_letters.inc()
    exposition = tmp_path / "metrics.txt"
    exposition.write_bytes(generate_latest(metrics.registry))
    result = subprocess.run(["promtool", "check", "metrics"], stdin=exposition.open("rb"), capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    text = exposition.read_text()
    assert 'aitax_stage_duration_seconds_count{stage="detect"} 5.0' in text
    assert 'aitax_faces_total{stage="detect"} 5.0' in text
    assert "aitax_dead_letters_total 1.0" in text
    assert "process_resident_memory_bytes" in text
