"""Real Elasticsearch: the official client's info()/ping(), and a bulk + percentiles round trip."""

from __future__ import annotations

import pytest
from elasticsearch import Elasticsearch, helpers

from aitax.stack.config import StackConfig
from aitax.telemetry.elastic_access import client as elasticsearch_client
from aitax.telemetry.events import EVENT_SCHEMA_VERSION, INDEX_PREFIX, Event

pytestmark = pytest.mark.integration


@pytest.fixture
def es(stack: StackConfig) -> Elasticsearch:
    return elasticsearch_client(stack.elasticsearch_url, request_timeout=30)


def test_official_client_info_and_ping(es: Elasticsearch) -> None:
    info = es.info()
    assert info["version"]["number"].startswith("8.19.")
    assert info["cluster_name"] == "aitax"
    assert info["tagline"] == "You Know, for Search"
    assert es.ping()


def test_bulk_events_and_percentiles_round_trip(es: Elasticsearch, unique_name: str) -> None:
    index = f"{INDEX_PREFIX}-{unique_name}"
    # Detection times 1..100 ms: the exact percentiles of this set are known.
    events = [
        Event(run_id=unique_name, stage="detect", stream_id="cam-1", frame_index=i,
              wall_start_ns=1_700_000_000_000_000_000 + i * 100_000_000,
              wall_end_ns=1_700_000_000_000_000_000 + i * 100_000_000 + i * 1_000_000,
              compute_time_ms=float(i), face_count=i % 3, data_size_bytes=37_300)
        for i in range(1, 101)
    ]
    indexed, errors = helpers.bulk(es, ({"_index": index, "_source": e.to_document()} for e in events),
                                   refresh="wait_for")
    assert (indexed, errors) == (100, [])
    try:
        # The template applied: strict mapping, no replicas.
        mapping = es.indices.get_mapping(index=index)[index]["mappings"]
        assert mapping["dynamic"] == "strict"
        assert mapping["properties"]["wall_start_ns"]["type"] == "long"
        result = es.search(index=index, size=0, query={"term": {"run_id": unique_name}}, aggs={
            "latency": {"percentiles": {"field": "compute_time_ms", "percents": [50, 99],
                                        "tdigest": {"compression": 1000}}},
            "faces": {"sum": {"field": "face_count"}},
            "version": {"max": {"field": "schema_version"}},
        })
        aggregations = result["aggregations"]
        assert result["hits"]["total"]["value"] == 100
        assert aggregations["latency"]["values"]["50.0"] == pytest.approx(50.5, abs=0.5)
        assert aggregations["latency"]["values"]["99.0"] == pytest.approx(99.5, abs=0.5)
        assert aggregations["faces"]["value"] == sum(i % 3 for i in range(1, 101))
        assert aggregations["version"]["value"] == EVENT_SCHEMA_VERSION
    finally:
        es.indices.delete(index=index)


def test_strict_mapping_rejects_unknown_fields(es: Elasticsearch, unique_name: str) -> None:
    index = f"{INDEX_PREFIX}-{unique_name}"
    try:
        with pytest.raises(Exception, match="strict_dynamic_mapping_exception"):
            es.index(index=index, document={"run_id": "r", "t3": 1})
    finally:
        es.indices.delete(index=index, ignore_unavailable=True)
