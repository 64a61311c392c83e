"""Who may do what, as data: every command has a principal that exists, every stage of every application is covered,
the ACLs say what the table says; certificates are private and made once; a process's identity is chosen once."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation
from cryptography import x509

from aitax.common.errors import UserError
from aitax.pipeline.transport.security import TLS_ENV, KafkaTls
from aitax.runs.applications import APPLICATIONS
from aitax.stack import security
from aitax.stack import stack as local_stack
from aitax.stack.config import StackConfig
from aitax.stack.pki import ensure_identities
from aitax.telemetry.elastic_access import CREDENTIALS_ENV
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
    for variable in (TLS_ENV, CREDENTIALS_ENV):
        monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv(local_stack.local_marker(variable), raising=False)
    monkeypatch.setattr(local_stack, "current_config", lambda: StackConfig())
    for principal in (security.ADMIN, "identify", "reader"):
        security.identity(principal).mkdir(parents=True)
    local_stack.use_local_identity("run")
    assert os.environ[TLS_ENV] == os.environ[CREDENTIALS_ENV] == str(security.identity(security.ADMIN))
    local_stack.use_local_identity("identify")  # a stage the operator started: its own principal
    assert os.environ[TLS_ENV] == os.environ[CREDENTIALS_ENV] == str(security.identity("identify"))
    monkeypatch.setenv(TLS_ENV, "/etc/aitax/kafka")  # a pod's Secret, for Kafka only
    monkeypatch.delenv(local_stack.local_marker(TLS_ENV))
    local_stack.use_local_identity("report")
    assert os.environ[TLS_ENV] == "/etc/aitax/kafka"
    assert os.environ[CREDENTIALS_ENV] == str(security.identity("reader"))
    monkeypatch.setattr(local_stack, "current_config", lambda: StackConfig(tls=False, elasticsearch_tls=False))
    local_stack.use_local_identity("identify")  # a plaintext stack: no local identity, a given one stays
    assert os.environ[TLS_ENV] == "/etc/aitax/kafka"
    assert CREDENTIALS_ENV not in os.environ


def test_a_child_in_a_state_folder_without_a_stack_takes_its_principal_beside_the_inherited_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(local_stack, "current_config", lambda: None)  # a test's or an experiment's own $AITAX_HOME
    (tmp_path / "pki" / "identify").mkdir(parents=True)
    monkeypatch.setenv(TLS_ENV, str(tmp_path / "pki" / security.ADMIN))
    monkeypatch.setenv(local_stack.local_marker(TLS_ENV), security.ADMIN)
    local_stack.use_local_identity("identify")
    assert os.environ[TLS_ENV] == str(tmp_path / "pki" / "identify")


def test_the_chart_reads_the_same_table() -> None:
    import json

    shipped = json.loads((Path(__file__).resolve().parents[2] / "charts/aitax/files/security.json").read_text())
    assert shipped == security.chart_view(), ("regenerate it: python -c 'import json; from aitax.stack.security import "
                                              "chart_view; print(json.dumps(chart_view(), indent=2))' > "
                                              "charts/aitax/files/security.json")


class _Namespace:
    """Secrets in memory, as the API server keeps them (the REST boundary is what this fakes)."""

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, bytes]] = {}
        self.writes: list[str] = []

    def read(self, name: str) -> dict[str, bytes] | None:
        return dict(self.secrets[name]) if name in self.secrets else None

    def write(self, name: str, data: dict[str, bytes], labels: dict[str, str], exists: bool) -> None:
        assert exists == (name in self.secrets)
        self.secrets[name] = dict(data)
        self.writes.append(name)


def test_a_releases_secrets_are_made_once_and_a_supplied_one_is_kept() -> None:
    from aitax.stack.release_secrets import ensure_release_secrets

    namespace = _Namespace()
    servers = {security.BROKER: ("*.k-headless.ns.svc.cluster.local",), security.ELASTICSEARCH: ("es",)}
    made = ensure_release_secrets(namespace, "r-identity", servers, {}, progress=lambda _: None)
    principals = [security.BROKER, security.ELASTICSEARCH, security.ADMIN, *NAMES]
    assert set(made) == {f"r-identity-{name}" for name in ("ca", *principals, "elasticsearch-realm")}
    identify = namespace.secrets["r-identity-identify"]
    assert {"ca.crt", "tls.crt", "tls.key", "username", "password"} <= identify.keys()
    assert identify["username"] == b"identify\n" and "keystore.pem" in namespace.secrets["r-identity-broker"]
    broker = x509.load_pem_x509_certificate(namespace.secrets["r-identity-broker"]["tls.crt"])
    names = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["*.k-headless.ns.svc.cluster.local"]
    realm = namespace.secrets["r-identity-elasticsearch-realm"]
    assert b"identify:$2b$" in realm["users"] and identify["password"] not in realm["users"]
    # An upgrade: nothing changes. A user's own Secret for identify: kept as given, the rest untouched.
    namespace.writes.clear()
    assert ensure_release_secrets(namespace, "r-identity", servers, {}, progress=lambda _: None) == []
    namespace.secrets["r-identity-identify"] = {**identify, "password": b"the user's own\n"}
    made = ensure_release_secrets(namespace, "r-identity", servers, {}, progress=lambda _: None)
    assert made == ["r-identity-elasticsearch-realm"]  # its hashes follow the supplied password
    assert namespace.secrets["r-identity-identify"]["password"] == b"the user's own\n"
