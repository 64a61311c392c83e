"""Real Prometheus: a process that registers its /metrics endpoint gets scraped."""

from __future__ import annotations

import time

import pytest
import requests
from prometheus_client import CollectorRegistry, Counter, start_http_server

from aitax.stack import prometheus
from aitax.stack.config import StackConfig

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
