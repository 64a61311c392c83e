"""Kafka on the local stack refuses what it should, on real brokers: no credential, the wrong principal, another CA,
plaintext; and each stage's principal may do its own work."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from aitax.pipeline.transport.security import TLS_ENV, KafkaTls
from aitax.stack import kafka
from aitax.stack.config import HOST, StackConfig
from aitax.stack.pki import ensure_identities
from aitax.stack.security import identity
from aitax.stack.stack import local_marker

pytestmark = pytest.mark.integration

TIMEOUT_S = 10.0


def _produce(config: StackConfig, topic: str, tls: dict[str, object]) -> tuple[list[str], list[str]]:
    """(delivery errors, None for a delivered record; client errors) of one record."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": config.bootstrap_servers, "acks": "all", "log_level": 0,
                         "message.timeout.ms": int(TIMEOUT_S * 1000), "error_cb": lambda e: errors.append(e.str()),
                         **tls})
    delivered: list[str] = []
    producer.produce(topic, b"x", on_delivery=lambda error, _: delivered.append(error and error.str()))
    producer.flush(TIMEOUT_S + 5)
    return delivered, errors


def _consume(config: StackConfig, topic: str, group: str, tls: dict[str, object]) -> str:
    """What one poll gives: 'record', an error's text, or 'nothing'."""
    consumer = Consumer({"bootstrap.servers": config.bootstrap_servers, "group.id": group, "log_level": 0,
                         "auto.offset.reset": "earliest", **tls})
    try:
        consumer.subscribe([topic])
        message = consumer.poll(TIMEOUT_S)
        if message is None:
            return "nothing"
        return message.error().str() if message.error() else "record"
    finally:
        consumer.close()


def _as(principal: str) -> dict[str, object]:
    return KafkaTls(identity(principal)).confluent()


def test_a_client_without_a_certificate_is_refused(stack: StackConfig) -> None:
    delivered, errors = _produce(stack, "identities", {})
    assert delivered == ["Local: Message timed out"] or not delivered
    assert any("brokers are down" in e or "SSL" in e or "Disconnected" in e for e in errors), errors


def test_a_certificate_from_another_ca_is_refused(stack: StackConfig, tmp_path: Path) -> None:
    ensure_identities(tmp_path, {"identify": ()})  # a CA of its own, and an identify signed by it
    stranger = KafkaTls(tmp_path / "identify").confluent() | {"ssl.ca.location": str(identity("identify") / "ca.crt")}
    delivered, errors = _produce(stack, "identities", stranger)
    assert delivered != [None]
    assert errors, "the brokers accepted a certificate from another CA"


def test_the_client_port_speaks_only_tls(stack: StackConfig) -> None:
    # A plaintext ApiVersions request: a PLAINTEXT listener answers it; a TLS one reads it as a broken handshake.
    request = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    with socket.create_connection((HOST, stack.broker_port(1)), timeout=TIMEOUT_S) as connection:
        connection.sendall(struct.pack(">i", len(request)) + request)
        connection.settimeout(TIMEOUT_S)
        try:
            answer = connection.recv(4096)
        except (ConnectionResetError, TimeoutError):
            answer = b""
    # nothing, or a TLS alert record (content type 21): never a Kafka response
    assert answer == b"" or answer[0] == 21, f"a plaintext request was answered: {answer[:16]!r}"
    listeners = kafka.Broker(1, stack).properties()["listener.security.protocol.map"]
    assert "PLAINTEXT" not in listeners


def test_identify_may_not_write_faces_and_ingest_may_not_read_identities(stack: StackConfig) -> None:
    delivered, _ = _produce(stack, "faces", _as("identify"))
    assert delivered == ["Broker: Topic authorization failed"]
    assert "authorization failed" in _consume(stack, "identities", "identify-security-test", _as("ingest-detect"))


def test_each_stage_may_do_its_own_work(stack: StackConfig) -> None:
    assert _produce(stack, "faces", _as("ingest-detect"))[0] == [None]
    assert _consume(stack, "faces", "identify-security-test", _as("identify")) == "record"
    assert _produce(stack, "identities", _as("identify"))[0] == [None]
    assert _consume(stack, "faces", "other-group", _as("identify")).startswith("FindCoordinator")


def _aitax(*args: str, tls: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aitax.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, TLS_ENV: tls, local_marker(TLS_ENV): ""})


def test_a_missing_or_foreign_identity_is_one_line_naming_its_folder(stack: StackConfig, tmp_path: Path) -> None:
    missing = _aitax("audit", "--run-id", "nothing", tls=str(tmp_path / "nowhere"))
    assert missing.returncode != 0
    assert missing.stderr.strip() == f"aitax: Kafka TLS identity {tmp_path / 'nowhere'}: no ca.crt, tls.crt, tls.key " \
                                     "(a TLS Secret's files)"
    ensure_identities(tmp_path / "other", {"reader": ()})
    foreign = _aitax("audit", "--run-id", "nothing", tls=str(tmp_path / "other" / "reader"))
    assert foreign.returncode != 0
    assert len(foreign.stderr.strip().splitlines()) == 1, foreign.stderr
    assert f"refused the TLS identity {tmp_path / 'other' / 'reader'}: SSL handshake failed" in foreign.stderr
