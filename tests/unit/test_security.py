"""Who may do what, as data: every command has a principal that exists, every stage of every application is covered,
the ACLs say what the table says; certificates are private and made once; a process's identity is chosen once."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation
from cryptography import x509

from common.errors import UserError
from pipeline.transport.security import TLS_ENV, KafkaTls
from stack import security
from stack import stack as local_stack
from stack.config import StackConfig
from stack.pki import ensure_identities
from telemetry.applications import APPLICATIONS
from tests.command_line import find

NAMES = {principal.name for principal in security.PRINCIPALS}


def test_every_command_with_a_principal_exists_and_every_stage_has_one() -> None:
    for command, principal in security.COMMAND_PRINCIPALS.items():
        assert find([command]), command
        assert principal in NAMES, (command, principal)
    for app in APPLICATIONS.values():
        for stage in (app.producer, app.consumer, *(app.split or ())):
            assert stage.command in security.COMMAND_PRINCIPALS, stage.command


def test_the_acls_grant_each_stage_its_own_topics_only() -> None:
    bindings = security.acl_bindings([("x-faces", "faces"), ("x-identities", "identities"), ("mine", None)])
    granted = {(b.principal, b.name, b.operation) for b in bindings}
    assert ("User:identify", "x-faces", AclOperation.READ) in granted
    assert ("User:identify", "x-identities", AclOperation.WRITE) in granted
    assert ("User:identify", "x-faces", AclOperation.WRITE) not in granted
    assert ("User:ingest-detect", "x-faces", AclOperation.WRITE) in granted
    assert not any(b.name == "mine" for b in bindings)  # a topic that carries nothing named: the admin's alone
    readers = {p for p, name, op in granted if name == "x-identities" and op == AclOperation.READ}
    assert readers == {"User:reader", "User:load-generator"}  # never a stage


def test_identities_are_private_verified_by_their_ca_and_made_once(tmp_path: Path) -> None:
    ensure_identities(tmp_path, {"broker": ("127.0.0.1", "localhost"), "identify": ()})
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "identify" / "tls.key").stat().st_mode) == 0o600
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    broker = x509.load_pem_x509_certificate((tmp_path / "broker" / "tls.crt").read_bytes())
    broker.verify_directly_issued_by(ca)
    names = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    issued = (tmp_path / "identify" / "tls.crt").read_bytes()
    ensure_identities(tmp_path, {"identify": ()})
    assert (tmp_path / "identify" / "tls.crt").read_bytes() == issued  # kept
    (tmp_path / "ca.crt").unlink()  # a new CA: every identity is issued again
    ensure_identities(tmp_path, {"identify": ()})
    assert (tmp_path / "identify" / "tls.crt").read_bytes() != issued


def test_a_folder_without_a_secrets_files_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("x")
    with pytest.raises(UserError, match=rf"^Kafka TLS identity {tmp_path}: no ca.crt, tls.key \(a TLS Secret's"):
        KafkaTls(tmp_path)


def test_each_command_connects_as_its_principal_unless_given_one(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    monkeypatch.delenv(TLS_ENV, raising=False)
    monkeypatch.delenv(local_stack.LOCAL_IDENTITY_ENV, raising=False)
    monkeypatch.setattr(local_stack, "current_config", lambda: StackConfig())
    for principal in (security.ADMIN, "identify"):
        security.identity(principal).mkdir(parents=True)
    local_stack.use_local_kafka_identity("run")
    assert os.environ[TLS_ENV] == str(security.identity(security.ADMIN))
    local_stack.use_local_kafka_identity("identify")  # a stage the operator started: its own principal
    assert os.environ[TLS_ENV] == str(security.identity("identify"))
    monkeypatch.setenv(TLS_ENV, "/etc/aitax/kafka")  # a pod's Secret
    monkeypatch.delenv(local_stack.LOCAL_IDENTITY_ENV)
    local_stack.use_local_kafka_identity("identify")
    assert os.environ[TLS_ENV] == "/etc/aitax/kafka"
    monkeypatch.setattr(local_stack, "current_config", lambda: StackConfig(tls=False))
    monkeypatch.setenv(local_stack.LOCAL_IDENTITY_ENV, "identify")
    local_stack.use_local_kafka_identity("identify")  # a plaintext stack: no identity
    assert TLS_ENV not in os.environ


def test_a_child_in_a_state_folder_without_a_stack_takes_its_principal_beside_the_inherited_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(local_stack, "current_config", lambda: None)  # a test's or an experiment's own $AITAX_HOME
    (tmp_path / "pki" / "identify").mkdir(parents=True)
    monkeypatch.setenv(TLS_ENV, str(tmp_path / "pki" / security.ADMIN))
    monkeypatch.setenv(local_stack.LOCAL_IDENTITY_ENV, security.ADMIN)
    local_stack.use_local_kafka_identity("identify")
    assert os.environ[TLS_ENV] == str(tmp_path / "pki" / "identify")
