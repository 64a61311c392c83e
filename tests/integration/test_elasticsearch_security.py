"""Elasticsearch on the local stack refuses what it should, on the real server: no credential, a wrong password,
plaintext http, and each principal's role beyond its work; and a refused sink keeps its events for later."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import requests

from aitax.stack.config import HOST, StackConfig
from aitax.stack.security import identity
from aitax.stack.stack import local_marker
from aitax.telemetry.elastic import ElasticsearchSink, install_event_template
from aitax.telemetry.elastic_access import CREDENTIALS_ENV, ElasticsearchCredentials, client, http_options
from aitax.telemetry.events import INDEX_PREFIX, TEMPLATE_NAME, Event

pytestmark = pytest.mark.integration


def _as(principal: str) -> dict:
    return http_options(ElasticsearchCredentials(identity(principal)))


def _event(run_id: str) -> Event:
    now = time.time_ns()
    return Event(run_id=run_id, stage="detect", stream_id="cam-0", frame_index=0, wall_start_ns=now,
                 wall_end_ns=now + 1_000_000, compute_time_ms=1.0)


def test_a_request_without_a_credential_or_with_a_wrong_password_is_refused(stack: StackConfig) -> None:
    ca = identity("reader") / "ca.crt"
    assert requests.get(f"{stack.elasticsearch_url}/_cluster/health", verify=ca, timeout=10).status_code == 401
    wrong = requests.get(f"{stack.elasticsearch_url}/_cluster/health", verify=ca, auth=("reader", "guess"), timeout=10)
    assert wrong.status_code == 401


def test_plaintext_http_is_not_served(stack: StackConfig) -> None:
    assert stack.elasticsearch_url.startswith("https://")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{HOST}:{stack.elasticsearch_port}/_cluster/health", timeout=10)


def test_a_stage_may_write_events_but_not_read_or_delete_them_and_the_reader_only_read(
        stack: StackConfig, unique_name: str) -> None:
    index = f"{stack.elasticsearch_url}/{INDEX_PREFIX}-{unique_name}"
    document = _event(unique_name).to_document()
    try:
        assert requests.post(f"{index}/_doc", json=document, timeout=10, **_as("identify")).status_code == 201
        assert requests.get(f"{index}/_search", timeout=10, **_as("identify")).status_code == 403
        assert requests.delete(index, timeout=10, **_as("identify")).status_code == 403
        assert requests.get(f"{index}/_search", timeout=10, **_as("reader")).status_code == 200
        assert requests.post(f"{index}/_doc", json=document, timeout=10, **_as("reader")).status_code == 403
        template = requests.put(f"{stack.elasticsearch_url}/_index_template/{unique_name}", timeout=10,
                                json={"index_patterns": [f"{unique_name}-*"]}, **_as("identify"))
        assert template.status_code == 403
    finally:
        requests.delete(index, timeout=30, **_as("admin"))


def test_a_refused_sink_keeps_its_events_and_indexes_them_once_allowed(
        stack: StackConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = f"refused-{time.time_ns()}"
    monkeypatch.setenv(CREDENTIALS_ENV, str(identity("reader")))  # a principal that may not write events
    refused = ElasticsearchSink(stack.elasticsearch_url, tmp_path / "refused.jsonl", flush_interval_s=0.2)
    refused.emit(_event(run_id))
    refused.close()
    assert refused.indexed == 0 and refused.spooled == 1
    monkeypatch.setenv(CREDENTIALS_ENV, str(identity("detect")))
    allowed = ElasticsearchSink(stack.elasticsearch_url, tmp_path / "allowed.jsonl", flush_interval_s=0.2)
    deadline = time.monotonic() + 30
    while allowed.adopted < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    allowed.close()
    es = client(stack.elasticsearch_url, ElasticsearchCredentials(identity("admin")))
    es.indices.refresh(index=f"{INDEX_PREFIX}-*")
    assert es.count(index=f"{INDEX_PREFIX}-*", query={"term": {"run_id": run_id}})["count"] == 1


def test_a_writer_indexes_nothing_before_the_admins_template_so_no_index_is_mapped_by_guesses(
        stack: StackConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    admin = ElasticsearchCredentials(identity("admin"))
    es = client(stack.elasticsearch_url, admin)
    day = "2001.01.01"  # an index no other test writes: made by this event's first shipment
    index = f"{INDEX_PREFIX}-{day}"
    es.indices.delete(index=index, ignore_unavailable=True)
    es.indices.delete_index_template(name=TEMPLATE_NAME)
    try:
        monkeypatch.setenv(CREDENTIALS_ENV, str(identity("detect")))  # a stage's writer: may not install it
        sink = ElasticsearchSink(stack.elasticsearch_url, tmp_path / "early.jsonl", flush_interval_s=0.2)
        event = replace(_event(f"early-{time.time_ns()}"), wall_start_ns=978_307_200_000_000_000, partition=3)
        sink.emit(event)
        time.sleep(2)
        assert (sink.indexed, sink.spooled) == (0, 1)
        assert not es.indices.exists(index=index)
        assert install_event_template(stack.elasticsearch_url, admin)  # what the chart's topics Job does
        deadline = time.monotonic() + 30
        while sink.replayed < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        sink.close()
        assert sink.replayed == 1
        mapping = es.indices.get_mapping(index=index)[index]["mappings"]
        assert mapping["dynamic"] == "strict" and mapping["properties"]["partition"]["type"] == "integer"
    finally:
        install_event_template(stack.elasticsearch_url, admin)
        es.indices.delete(index=index, ignore_unavailable=True)


def test_a_missing_or_refused_credential_is_one_line_naming_its_folder(stack: StackConfig, tmp_path: Path) -> None:
    def report(credentials: Path) -> subprocess.CompletedProcess:
        environment = {**os.environ, CREDENTIALS_ENV: str(credentials), local_marker(CREDENTIALS_ENV): ""}
        return subprocess.run([sys.executable, "-m", "aitax.cli", "report", "--run", "nothing"],
                              capture_output=True, text=True, timeout=120, env=environment)

    missing = report(tmp_path / "nowhere")
    assert missing.returncode != 0
    assert missing.stderr.strip() == f"aitax: Elasticsearch credentials {tmp_path / 'nowhere'}: no username, " \
                                     "password (a basic-auth Secret's files)"
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / "username").write_text("reader\n")
    (tmp_path / "stale" / "password").write_text("an old password\n")
    (tmp_path / "stale" / "ca.crt").write_bytes((identity("reader") / "ca.crt").read_bytes())
    stale = report(tmp_path / "stale")
    assert stale.returncode != 0
    assert stale.stderr.strip() == f"aitax: run 'nothing': Elasticsearch at {stack.elasticsearch_url} refused the " \
                                   f"credentials in {tmp_path / 'stale'} (401)"
