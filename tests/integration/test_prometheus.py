"""Real Prometheus: a process that registers its /metrics endpoint gets scraped, and so does every broker."""

from __future__ import annotations

import json
import os
import time

import pytest
import requests
from prometheus_client import CollectorRegistry, Counter, start_http_server

from aitax.pipeline.transport import make_producer
from aitax.stack import kafka, prometheus
from aitax.stack.config import StackConfig, TopicSpec

pytestmark = pytest.mark.integration


def test_registered_target_is_scraped(stack: StackConfig, unique_name: str) -> None:
    registry = CollectorRegistry()
    counter = Counter("aitax_test_frames", "frames seen by the test target", registry=registry)
    counter.inc(42)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = server.server_address[1]
    prometheus.register_target(unique_name, port, {"stage": "test"})
    try:
        deadline = time.monotonic() + 60
        value = None
        while time.monotonic() < deadline:
            response = requests.get(f"{stack.prometheus_url}/api/v1/query", timeout=5,
                                    params={"query": f'aitax_test_frames_total{{instance_name="{unique_name}"}}'})
            results = response.json()["data"]["result"]
            if results:
                value = float(results[0]["value"][1])
                assert results[0]["metric"]["stage"] == "test"
                break
            time.sleep(1)
        assert value == 42.0
    finally:
        prometheus.unregister_target(unique_name)
        server.shutdown()
        thread.join(5)


def _query(stack: StackConfig, promql: str) -> list[dict]:
    response = requests.get(f"{stack.prometheus_url}/api/v1/query", params={"query": promql}, timeout=5)
    return response.json()["data"]["result"]


def test_every_broker_is_scraped_and_counts_the_bytes_written(stack: StackConfig, unique_name: str) -> None:
    kafka.ensure_topics(stack, [TopicSpec(unique_name, 3)])
    producer = make_producer("confluent-kafka", stack.bootstrap_servers)
    payload_bytes = 0
    for index in range(100):
        value = os.urandom(20_000)  # random: no compression can shrink what the brokers count
        producer.send(unique_name, value=value, key=str(index).encode())
        payload_bytes += len(value)
    assert producer.flush(60) == 0
    producer.close()

    # This stack's brokers (a developer's Prometheus may still hold the last samples of a larger stack's).
    up_query = f'up{{role="kafka-broker", broker=~"{"|".join(str(n) for n in stack.node_ids)}"}}'
    bytes_query = f'sum(kafka_server_brokertopicmetrics_bytesin_total{{topic="{unique_name}"}})'
    deadline = time.monotonic() + 60
    while True:
        up = {r["metric"]["broker"]: float(r["value"][1]) for r in _query(stack, up_query)}
        counted = _query(stack, bytes_query)
        counted_bytes = float(counted[0]["value"][1]) if counted else 0.0
        if (up == {str(n): 1.0 for n in stack.node_ids} and counted_bytes >= payload_bytes) \
                or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert up == {str(n): 1.0 for n in stack.node_ids}
    # Leaders count what producers sent them: the payload plus record and batch headers, not a byte less.
    assert payload_bytes <= counted_bytes < payload_bytes * 1.05
    under_replicated = _query(stack, "sum(kafka_server_replicamanager_underreplicatedpartitions)")
    assert float(under_replicated[0]["value"][1]) == 0


def test_the_grafana_dashboards_broker_metrics_exist(stack: StackConfig) -> None:
    from tests.unit.test_dashboards import GRAFANA_JSON, grafana_broker_metric_names

    wanted = grafana_broker_metric_names(json.loads(GRAFANA_JSON.read_text()))
    served = {r["metric"]["__name__"] for r in _query(stack, '{__name__=~"kafka_.+", role="kafka-broker"}')}
    deadline = time.monotonic() + 30
    while not wanted <= served and time.monotonic() < deadline:  # a just-started stack: first scrape pending
        time.sleep(1)
        served = {r["metric"]["__name__"] for r in _query(stack, '{__name__=~"kafka_.+", role="kafka-broker"}')}
    assert wanted <= served, wanted - served
