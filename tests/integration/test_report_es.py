"""The report from Elasticsearch equals the report from JSONL, on the real local stack's ES."""

from __future__ import annotations

from pathlib import Path

import pytest
from elasticsearch import helpers

from aitax.common.errors import UserError
from aitax.reporting.report import build_report
from aitax.stack.config import StackConfig
from aitax.telemetry.elastic_access import client as elasticsearch_client
from aitax.telemetry.event_sources import load_events
from aitax.telemetry.events import INDEX_PREFIX
from tests.unit.test_report import synthetic_documents, write_jsonl

pytestmark = pytest.mark.integration


def test_report_from_elasticsearch_equals_report_from_jsonl(stack: StackConfig, unique_name: str,
                                                             tmp_path: Path) -> None:
    run_id = unique_name  # unique across indices too: load_events searches every aitax-events-* index
    documents = synthetic_documents(run_id=run_id)
    index = f"{INDEX_PREFIX}-{unique_name}"
    es = elasticsearch_client(stack.elasticsearch_url, request_timeout=30)
    try:
        indexed, errors = helpers.bulk(es, ({"_index": index, "_source": d} for d in documents), refresh="wait_for")
        assert (indexed, errors) == (len(documents), [])
        from_es = load_events(run_id, stack.elasticsearch_url)
        from_files = load_events(run_id, write_jsonl(tmp_path / "run", documents))
        assert from_es.malformed_lines == 0
        assert sorted(from_es.documents, key=repr) == sorted(from_files.documents, key=repr)
        assert [d["wall_start_ns"] for d in from_es.documents] == sorted(d["wall_start_ns"] for d in documents)
        report = build_report(run_id, from_es.documents)
        assert report == build_report(run_id, from_files.documents)
        assert (report.latency.faces, report.latency.e2e.mean_ms) == (5, 520.0)
        with pytest.raises(UserError, match=rf"^run '{run_id}-none': no events in {stack.elasticsearch_url}$"):
            load_events(f"{run_id}-none", stack.elasticsearch_url)
    finally:
        es.indices.delete(index=index, ignore_unavailable=True)
        es.close()
