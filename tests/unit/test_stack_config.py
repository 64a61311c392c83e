"""The stack's generated configuration: the durability and fencing settings every experiment relies on."""

from __future__ import annotations

import json

import pytest

from aitax.common.errors import UserError
from aitax.stack import kafka, prometheus
from aitax.stack.config import StackConfig


@pytest.mark.parametrize("brokers", [0, 2, 9])
def test_broker_count_outside_3_to_8_is_refused(brokers: int) -> None:
    with pytest.raises(UserError, match=f"--brokers {brokers}"):
        StackConfig(brokers=brokers)


def test_short_faces_retention_is_refused() -> None:
    with pytest.raises(UserError, match="faces-retention-ms 1000"):
        StackConfig(faces_retention_ms=1000)


def test_ports_do_not_collide_for_eight_brokers() -> None:
    config = StackConfig(brokers=8)
    ports = [config.broker_port(n) for n in config.node_ids] + [config.controller_port(n) for n in config.node_ids]
    ports += [config.elasticsearch_port, config.elasticsearch_transport_port, config.prometheus_port]
    assert len(ports) == len(set(ports))


def test_broker_properties_replicate_three_ways_and_fence_fast() -> None:
    config = StackConfig(brokers=4, log_dirs_per_broker=2)
    first, fourth = kafka.Broker(1, config), kafka.Broker(4, config)
    props = first.properties()
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    for internal in ("offsets.topic", "transaction.state.log", "share.coordinator.state.topic"):
        assert props[f"{internal}.replication.factor"] == "3"
    assert int(props["broker.session.timeout.ms"]) <= 3000
    assert props["auto.create.topics.enable"] == "false"
    assert len(props["log.dirs"].split(",")) == 2
    # At most three controllers; the fourth node is a broker only.
    assert props["controller.quorum.voters"].count("@") == 3
    assert fourth.properties()["process.roles"] == "broker"
    assert "CONTROLLER" not in fourth.properties()["listeners"]


def test_topics_are_durable_and_faces_short_lived() -> None:
    topics = {t.name: t for t in StackConfig(faces_retention_ms=600_000).topics()}
    assert set(topics) == {"faces", "identities", "faces.dlq"}
    assert all(t.config["min.insync.replicas"] == "2" for t in topics.values())
    assert topics["faces"].config["retention.ms"] == "600000"
    assert int(topics["faces"].config["segment.ms"]) <= 600_000
    assert topics["faces"].config["message.timestamp.type"] == "LogAppendTime"


def test_saved_description_round_trips(tmp_path) -> None:
    config = StackConfig(brokers=5, elasticsearch=False)
    config.save(tmp_path / "stack.json")
    assert StackConfig.load(tmp_path / "stack.json") == config


def test_corrupt_description_names_the_file(tmp_path) -> None:
    path = tmp_path / "stack.json"
    path.write_text("{not json")
    with pytest.raises(UserError, match=r"stack\.json"):
        StackConfig.load(path)


def test_prometheus_targets_are_file_sd_entries(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    path = prometheus.register_target("identify-1", 9400, {"stage": "identify"})
    entry = json.loads(path.read_text())
    assert entry == [{"targets": ["127.0.0.1:9400"], "labels": {"instance_name": "identify-1", "stage": "identify"}}]
    prometheus.unregister_target("identify-1")
    assert not path.exists()


def test_cluster_id_never_starts_with_a_dash(tmp_path, monkeypatch) -> None:
    import uuid

    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    ids = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" + bytes(15))])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(ids))
    cluster = kafka.cluster_id()
    assert not cluster.startswith("-")
    assert len(cluster) == 22
    assert kafka.cluster_id() == cluster  # made once, then read back


def test_commands_that_need_the_stack_say_how_to_start_it(tmp_path, monkeypatch) -> None:
    from aitax.stack.stack import running_config

    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    with pytest.raises(UserError, match=r"^no local stack: run `aitax stack up` first$"):
        running_config()
