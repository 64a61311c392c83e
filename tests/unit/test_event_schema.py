"""The event schema and the Elasticsearch template built from it stay in step."""

from __future__ import annotations

from dataclasses import fields

from aitax.telemetry.events import EVENT_SCHEMA_VERSION, INDEX_MAPPING, Event, index_template


def test_every_event_field_is_mapped_and_mapping_is_strict() -> None:
    mapped = set(INDEX_MAPPING["properties"])
    assert {f.name for f in fields(Event)} | {"@timestamp"} == mapped
    assert INDEX_MAPPING["dynamic"] == "strict"


def test_document_omits_unset_fields_and_carries_version() -> None:
    event = Event(run_id="r1", stage="detect", stream_id="cam-1", frame_index=7,
                  wall_start_ns=1_700_000_000_000_000_000, wall_end_ns=1_700_000_000_074_800_000,
                  compute_time_ms=74.8, face_count=2)
    document = event.to_document()
    assert document["schema_version"] == EVENT_SCHEMA_VERSION
    assert document["@timestamp"] == 1_700_000_000_000
    assert "partition" not in document
    assert set(document) <= set(INDEX_MAPPING["properties"])


def test_template_has_no_replicas_on_a_single_node() -> None:
    assert index_template()["template"]["settings"]["number_of_replicas"] == 0
