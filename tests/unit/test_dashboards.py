"""The shipped Kibana and Grafana dashboards, held to the event schema and the metric names.

Kibana cannot run here, so its saved objects are checked structurally and the import API is a fake HTTP
server on 127.0.0.1 that records what `import_saved_objects` sends.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from aitax.common.errors import UserError
from aitax.reporting.kibana import (
    DEFAULT_NDJSON,
    import_saved_objects,
    read_saved_objects,
    referenced_fields,
    runtime_fields,
)
from aitax.telemetry.events import INDEX_MAPPING, INDEX_PREFIX, STAGES

GRAFANA_JSON = Path(__file__).parents[2] / "aitax" / "reporting" / "dashboards" / "grafana.json"
DATA_VIEW_ID = "aitax-dataview"
# The metrics every stage process serves (aitax/telemetry/metrics.py), and the series a histogram expands to.
METRIC_NAMES = {
    "aitax_stage_duration_seconds",
    "aitax_broker_wait_seconds",
    "aitax_batch_size",
    "aitax_frames_total",
    "aitax_faces_total",
    "aitax_payload_bytes_total",
    "aitax_frame_queue_depth",
    "aitax_consumer_lag_records",
    "aitax_dead_letters_total",
    "aitax_delivery_failures_total",
    "aitax_duplicate_faces_total",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
}
HISTOGRAM_SERIES = {f"{histogram}_{suffix}" for suffix in ("bucket", "sum", "count")
                    for histogram in ("aitax_stage_duration_seconds", "aitax_broker_wait_seconds", "aitax_batch_size")}
METRIC_NAME = re.compile(r"aitax_[a-z_]+|process_[a-z_]+")
# The brokers' metrics (the JMX exporter rules): tests/integration/test_prometheus.py checks live brokers serve them.
BROKER_METRIC_NAME = re.compile(r"kafka_[a-z_]+")


def mapped_fields() -> set[str]:
    """Field paths in the index mapping, objects flattened to `parent.child`."""
    paths = set()
    for name, spec in INDEX_MAPPING["properties"].items():
        paths |= {f"{name}.{child}" for child in spec["properties"]} if "properties" in spec else {name}
    return paths


def unknown_fields(ndjson_path: Path) -> set[str]:
    return referenced_fields(ndjson_path) - mapped_fields() - runtime_fields(ndjson_path)


@pytest.fixture(scope="module")
def saved_objects() -> list[dict[str, Any]]:
    return read_saved_objects(DEFAULT_NDJSON)


@pytest.fixture(scope="module")
def grafana() -> dict[str, Any]:
    return json.loads(GRAFANA_JSON.read_text())


# --- Kibana saved objects ---------------------------------------------------------------------------------


def test_every_line_is_a_saved_object_and_the_last_is_the_export_summary() -> None:
    lines = DEFAULT_NDJSON.read_text().splitlines()
    documents = [json.loads(line) for line in lines]
    *objects, summary = documents
    assert summary["exportedCount"] == len(objects) and summary["missingRefCount"] == 0
    for obj in objects:
        assert {"type", "id", "attributes", "references", "coreMigrationVersion", "typeMigrationVersion"} <= set(obj)
        assert obj["coreMigrationVersion"] == "8.8.0"  # what every 8.8+ export (8.19 included) writes


def test_ids_are_unique_and_deterministic(saved_objects: list[dict[str, Any]]) -> None:
    ids = [obj["id"] for obj in saved_objects]
    assert len(ids) == len(set(ids))
    assert all(object_id.startswith("aitax-") for object_id in ids)


def test_every_reference_resolves(saved_objects: list[dict[str, Any]]) -> None:
    shipped = {(obj["type"], obj["id"]) for obj in saved_objects}
    for obj in saved_objects:
        for reference in obj["references"]:
            assert (reference["type"], reference["id"]) in shipped, f"{obj['id']} -> {reference}"


def test_the_data_view_covers_the_event_indices_on_their_time_field(saved_objects: list[dict[str, Any]]) -> None:
    (data_view,) = [obj for obj in saved_objects if obj["type"] == "index-pattern"]
    assert data_view["id"] == DATA_VIEW_ID
    assert data_view["attributes"]["title"] == f"{INDEX_PREFIX}-*"
    assert data_view["attributes"]["timeFieldName"] == "@timestamp"
    assert INDEX_MAPPING["properties"]["@timestamp"]["type"] == "date_nanos"
    runtime = json.loads(data_view["attributes"]["runtimeFieldMap"])
    assert runtime["duration_ms"]["type"] == "double"
    assert "wall_end_ns" in runtime["duration_ms"]["script"]["source"]


def test_the_dashboard_shows_every_visualization(saved_objects: list[dict[str, Any]]) -> None:
    (dashboard,) = [obj for obj in saved_objects if obj["type"] == "dashboard"]
    lens_ids = {obj["id"] for obj in saved_objects if obj["type"] == "lens"}
    assert {"aitax-fig6-breakdown", "aitax-fig7-latency-vs-faces"} <= lens_ids
    assert {ref["id"] for ref in dashboard["references"] if ref["type"] == "lens"} == lens_ids
    panels = json.loads(dashboard["attributes"]["panelsJSON"])
    reference_names = {ref["name"] for ref in dashboard["references"]}
    assert {f"{panel['panelIndex']}:{panel['panelRefName']}" for panel in panels} <= reference_names
    assert len({panel["panelIndex"] for panel in panels}) == len(panels)


def test_every_lens_layer_has_its_data_view_and_columns(saved_objects: list[dict[str, Any]]) -> None:
    for lens in (obj for obj in saved_objects if obj["type"] == "lens"):
        state = lens["attributes"]["state"]
        layers = state["datasourceStates"]["formBased"]["layers"]
        reference_names = {ref["name"] for ref in lens["references"] if ref["id"] == DATA_VIEW_ID}
        assert {f"indexpattern-datasource-layer-{layer_id}" for layer_id in layers} == reference_names
        for drawn in state["visualization"]["layers"]:
            columns = layers[drawn["layerId"]]["columns"]
            used = [
                drawn["xAccessor"],
                *drawn["accessors"],
                *([drawn["splitAccessor"]] if "splitAccessor" in drawn else []),
            ]
            assert set(used) <= set(columns), lens["id"]
            assert set(layers[drawn["layerId"]]["columnOrder"]) == set(columns)


def test_fig6_shows_the_stages_in_pipeline_order(saved_objects: list[dict[str, Any]]) -> None:
    (fig6,) = [obj for obj in saved_objects if obj["id"] == "aitax-fig6-breakdown"]
    columns = fig6["attributes"]["state"]["datasourceStates"]["formBased"]["layers"]["breakdown"]["columns"]
    assert tuple(bucket["label"] for bucket in columns["stage"]["params"]["filters"]) == STAGES
    assert {columns[name]["sourceField"] for name in ("mean-duration", "mean-compute")} == {
        "duration_ms",
        "compute_time_ms",
    }


def test_every_referenced_field_is_in_the_index_mapping_or_a_runtime_field() -> None:
    fields = referenced_fields(DEFAULT_NDJSON)
    assert {"stage", "face_count", "compute_time_ms", "duration_ms", "substeps_ms.client_queue"} <= fields
    assert unknown_fields(DEFAULT_NDJSON) == set()


@pytest.mark.parametrize(
    ("correct", "misspelt", "unknown"),
    [
        ('"sourceField":"face_count"', '"sourceField":"faces_count"', "faces_count"),  # a Lens column
        ('stage : \\"broker_wait\\"', 'stages : \\"broker_wait\\"', "stages"),  # a KQL query
        ('\\"fieldName\\":\\"run_id\\"', '\\"fieldName\\":\\"runid\\"', "runid"),  # a dashboard control
        ("doc['wall_end_ns']", "doc['wall_end']", "wall_end"),  # the runtime field's script
    ],
)
def test_the_field_check_catches_a_misspelt_field(tmp_path: Path, correct: str, misspelt: str, unknown: str) -> None:
    shipped = DEFAULT_NDJSON.read_text()
    assert correct in shipped
    broken = tmp_path / "kibana.ndjson"
    broken.write_text(shipped.replace(correct, misspelt, 1))
    assert unknown_fields(broken) == {unknown}


def test_an_unreadable_saved_object_type_is_refused(tmp_path: Path) -> None:
    legacy = {"type": "visualization", "id": "legacy", "attributes": {"visState": "{}"}, "references": []}
    ndjson = tmp_path / "kibana.ndjson"
    ndjson.write_text(json.dumps(legacy) + "\n")
    with pytest.raises(ValueError, match="visualization legacy"):
        referenced_fields(ndjson)


# --- Grafana ----------------------------------------------------------------------------------------------


def test_grafana_dashboard_takes_its_prometheus_as_an_input(grafana: dict[str, Any]) -> None:
    assert [(item["name"], item["pluginId"]) for item in grafana["__inputs"]] == [("DS_PROMETHEUS", "prometheus")]
    assert 36 <= grafana["schemaVersion"] <= 41
    assert grafana["uid"] and grafana["panels"]


def test_every_grafana_panel_and_query_has_a_datasource(grafana: dict[str, Any]) -> None:
    for panel in grafana["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"], panel["title"]
        assert all(target["datasource"]["uid"] == "${DS_PROMETHEUS}" for target in panel["targets"])


def test_grafana_queries_use_only_the_served_metric_names(grafana: dict[str, Any]) -> None:
    exprs = [target["expr"] for panel in grafana["panels"] for target in panel["targets"]]
    exprs += [variable["query"]["query"] for variable in grafana["templating"]["list"]]
    used = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert used <= METRIC_NAMES | HISTOGRAM_SERIES, used - METRIC_NAMES - HISTOGRAM_SERIES
    # every metric the processes serve is on the dashboard
    assert {name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for name in used} == METRIC_NAMES


def grafana_broker_metric_names(grafana: dict[str, Any]) -> set[str]:
    return {name for panel in grafana["panels"] for target in panel["targets"]
            for name in BROKER_METRIC_NAME.findall(target["expr"])}


def test_grafana_shows_the_brokers_side(grafana: dict[str, Any]) -> None:
    assert {"kafka_server_brokertopicmetrics_bytesin_total", "kafka_network_request_total_time_ms",
            "kafka_server_request_handler_idle_ratio",
            "kafka_server_replicamanager_underreplicatedpartitions"} <= grafana_broker_metric_names(grafana)


def test_grafana_shows_latency_quantiles_by_stage_and_cpu_by_role(grafana: dict[str, Any]) -> None:
    exprs = " ".join(target["expr"] for panel in grafana["panels"] for target in panel["targets"])
    for quantile in ("0.5", "0.99"):
        assert f"histogram_quantile({quantile}, sum by (le, stage) (rate(aitax_stage_duration_seconds_bucket" in exprs
    assert 'sum by (role) (rate(process_cpu_seconds_total{job="aitax"' in exprs


# --- the import API, against a fake Kibana ----------------------------------------------------------------


@dataclass
class FakeKibana:
    url: str = ""
    status: int = 200
    answer: dict[str, Any] = field(default_factory=lambda: {"success": True, "successCount": 8, "successResults": []})
    requests: list[dict[str, Any]] = field(default_factory=list)


def recording_handler(kibana: FakeKibana) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            kibana.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            reply = json.dumps(kibana.answer).encode()
            self.send_response(kibana.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

    return Handler


@pytest.fixture
def fake_kibana() -> Iterator[FakeKibana]:
    kibana = FakeKibana()
    server = ThreadingHTTPServer(("127.0.0.1", 0), recording_handler(kibana))
    kibana.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield kibana
    server.shutdown()
    server.server_close()
    thread.join()


def multipart_files(request: dict[str, Any]) -> dict[str, tuple[str, bytes]]:
    """Form field name -> (file name, content) of a recorded multipart/form-data request."""
    header = f"Content-Type: {request['headers']['Content-Type']}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(header + request["body"])
    return {
        part.get_param("name", header="content-disposition"): (part.get_filename(), part.get_payload(decode=True))
        for part in message.iter_parts()
    }


def test_import_posts_the_file_with_xsrf_header_into_the_space(
    fake_kibana: FakeKibana, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIBANA_API_KEY", "c2VjcmV0")
    assert import_saved_objects(fake_kibana.url + "/", DEFAULT_NDJSON, space="perf-lab") == 8
    (request,) = fake_kibana.requests
    assert request["path"] == "/s/perf-lab/api/saved_objects/_import?overwrite=true"
    assert request["headers"]["kbn-xsrf"] == "true"
    assert request["headers"]["Authorization"] == "ApiKey c2VjcmV0"
    assert request["headers"]["Content-Type"].startswith("multipart/form-data; boundary=")
    assert multipart_files(request) == {"file": ("kibana.ndjson", DEFAULT_NDJSON.read_bytes())}


def test_import_into_the_default_space_without_overwrite(
    fake_kibana: FakeKibana, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KIBANA_API_KEY", raising=False)
    import_saved_objects(fake_kibana.url, DEFAULT_NDJSON, overwrite=False)
    (request,) = fake_kibana.requests
    assert request["path"] == "/api/saved_objects/_import"
    assert "Authorization" not in request["headers"]


def test_a_failed_import_names_its_first_error_on_one_line(fake_kibana: FakeKibana) -> None:
    fake_kibana.answer = {
        "success": False,
        "successCount": 6,
        "errors": [
            {
                "id": "aitax-fig6-breakdown",
                "type": "lens",
                "meta": {"title": "Fig. 6: mean\nlatency per stage"},
                "error": {"type": "missing_references", "references": [{"type": "index-pattern", "id": "gone"}]},
            },
            {"id": "aitax-dashboard", "type": "dashboard", "error": {"type": "conflict"}},
        ],
    }
    with pytest.raises(UserError) as raised:
        import_saved_objects(fake_kibana.url, DEFAULT_NDJSON)
    message = str(raised.value)
    assert "\n" not in message
    assert "6 objects, 2 failed" in message
    assert 'lens aitax-fig6-breakdown "Fig. 6: mean latency per stage"' in message
    assert "missing_references: missing index-pattern gone" in message


def test_a_refused_import_becomes_one_line(fake_kibana: FakeKibana) -> None:
    fake_kibana.status = 403
    fake_kibana.answer = {"statusCode": 403, "error": "Forbidden", "message": "Unable to bulk_create lens,\ndashboard"}
    with pytest.raises(UserError, match=r"^Kibana refused the import \(403\): Unable to bulk_create lens, dashboard$"):
        import_saved_objects(fake_kibana.url, DEFAULT_NDJSON)


def test_an_unreachable_kibana_becomes_one_line() -> None:
    with socket.socket() as probe:  # a port nothing listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UserError) as raised:
        import_saved_objects(f"http://127.0.0.1:{port}", DEFAULT_NDJSON)
    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith(f"cannot reach Kibana at http://127.0.0.1:{port}: ")
    assert "refused" in str(raised.value).lower()


@pytest.mark.parametrize("space", ["Perf Lab", "../admin"])
def test_a_bad_space_id_is_refused_before_any_request(space: str) -> None:
    with pytest.raises(UserError, match="bad Kibana space id"):
        import_saved_objects("http://127.0.0.1:9", DEFAULT_NDJSON, space=space)


def test_kibana_import_command(fake_kibana: FakeKibana, capsys: pytest.CaptureFixture[str]) -> None:
    from aitax.cli import main

    assert main(["kibana", "import", "--url", fake_kibana.url, "--space", "lab"]) == 0
    assert fake_kibana.requests[0]["path"].startswith("/s/lab/api/saved_objects/_import")
    assert f"{fake_kibana.url}/s/lab/app/dashboards#/view/aitax-dashboard" in capsys.readouterr().out
