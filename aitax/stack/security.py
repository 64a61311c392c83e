"""Who may do what on the local stack's Kafka and Elasticsearch: a principal per stage, each allowed only what its
stage needs.

On Kafka a principal is the CN of its certificate (`stack.pki`); the brokers and the admin (topic creation, ACLs, the
stack's own checks) are super users, every other principal holds only the ACLs below. A topic's ACLs are granted when
it is created (`acl_bindings`, from `stack.kafka.ensure_topics`), so an experiment's prefixed topics get the same
rules as the pipeline's. On Elasticsearch the same principal is a user of the file realm with one role: a stage may
write events and nothing else, the reader may read them, the admin is a superuser (index template, clean-up).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from aitax.common.paths import stack_dir
from aitax.pipeline.transport.security import CA_FILE, CERTIFICATE_FILE, KEY_FILE, READER, READER_MOUNT
from aitax.stack.config import HOST
from aitax.telemetry.elastic_access import PASSWORD_FILE, USERNAME_FILE

KEYSTORE_FILE = "keystore.pem"  # a Java process's key and certificate in one file, as Kafka's PEM key store reads it
BROKER = "broker"
ELASTICSEARCH = "elasticsearch"  # the Elasticsearch server's own certificate
ADMIN = "admin"
# The live dashboard's server certificate and its viewer's login (`aitax dashboard`); it reads events as the reader.
DASHBOARD = "dashboard"
VIEWER = "viewer"
# Elasticsearch roles (`elasticsearch_roles`), by what a principal does with events
EVENTS_WRITER, EVENTS_READER, SUPERUSER = "aitax_events_writer", "aitax_events_reader", "superuser"


@dataclass(frozen=True)
class Principal:
    name: str
    reads: tuple[str, ...] = ()  # `pipeline.schema.Topics` fields it consumes
    writes: tuple[str, ...] = ()  # fields it produces to
    groups: tuple[str, ...] = ()  # consumer group name prefixes it may join
    describes_groups: bool = False  # may read every group's committed offsets (a stage's lag)
    events_role: str = EVENTS_WRITER  # its Elasticsearch role: every stage logs events, the reader reads them


# One principal per stage, as the issue's table of least privilege: a stage reads what it consumes and writes what
# it produces and its dead letters, nothing more.
PRINCIPALS = (
    # ingest-detect, and its ingest half alone in three stages (frames)
    Principal("ingest-detect", writes=("faces", "dlq", "frames")),
    Principal("detect", reads=("frames",), writes=("faces", "dlq"), groups=("detect",)),
    Principal("detect-objects", reads=("frames",), writes=("detections", "dlq"), groups=("detect-objects",)),
    Principal("identify", reads=("faces",), writes=("identities", "dlq"), groups=("identify",)),
    # the emulator's producers: ingest-detect's rights, and a closed loop's (--in-flight) read of the answers
    Principal("load-generator", reads=("identities",), writes=("faces", "dlq", "frames"), groups=("closed-loop-",)),
    # read-back, audit and collect: every topic, nothing written
    Principal(READER, reads=("faces", "identities", "dlq", "frames", "detections"), groups=("readback-", "aitax-"),
              describes_groups=True, events_role=EVENTS_READER),
)

# The principal each `aitax` command runs as on the local stack; any other command is the operator's (admin): it
# creates topics, starts the stages and reads their results back.
COMMAND_PRINCIPALS = {
    "ingest-detect": "ingest-detect", "ingest": "ingest-detect", "emulate-producers": "load-generator",
    "detect": "detect", "emulate-detectors": "detect",
    "detect-objects": "detect-objects",
    "identify": "identify", "emulate-consumers": "identify",
    "audit": READER, "collect": READER, "report": READER, "dashboard": READER,
}


def chart_view() -> dict[str, object]:
    """What the Helm chart reads of this table (charts/aitax/files/security.json, which a test keeps equal to
    this): the principal each stage command runs as, and the Java and server identities it mounts."""
    return {"commands": dict(sorted(COMMAND_PRINCIPALS.items())), "admin": ADMIN, "broker": BROKER,
            "elasticsearch": ELASTICSEARCH, "reader": READER, "readerMount": READER_MOUNT}


def pki_dir() -> Path:
    return stack_dir() / "pki"


def issue_identities(folder: Path | None = None, servers: dict[str, tuple[str, ...]] | None = None) -> None:
    """Every principal's certificate and key (made once, renewed near expiry), Elasticsearch password (made once)
    and, for the Java processes, PEM key store, under `folder` (the local stack's `pki_dir()`, or a release's
    Secrets copied out by `stack.release_secrets`). `servers`: the brokers' and Elasticsearch's host names."""
    from aitax.stack.pki import ensure_identities, write_private  # `cryptography`: only where certificates are made

    folder = folder or pki_dir()
    servers = servers or {BROKER: (HOST, "localhost"), ELASTICSEARCH: (HOST, "localhost"),
                          DASHBOARD: (HOST, "localhost")}
    ensure_identities(folder, {**servers, ADMIN: (), **{p.name: () for p in PRINCIPALS}})
    for java_user in (BROKER, ADMIN):  # the brokers, and Kafka's own tools run as the admin
        own = folder / java_user
        write_private(own / KEYSTORE_FILE, (own / KEY_FILE).read_bytes() + (own / CERTIFICATE_FILE).read_bytes())
    logins = {user: user for user in elasticsearch_users()}
    if DASHBOARD in servers:
        logins[DASHBOARD] = VIEWER  # the person watching the dashboard: a login to it alone
    for principal, user in logins.items():
        own = folder / principal
        (own / USERNAME_FILE).write_text(user + "\n")
        if not (own / PASSWORD_FILE).exists():
            write_private(own / PASSWORD_FILE, (secrets.token_urlsafe(32) + "\n").encode())


def file_realm(folder: Path) -> dict[str, bytes]:
    """Elasticsearch's file realm for the passwords under `folder`: `users` (bcrypt hashes only), `users_roles`
    and `roles.yml`, as files of its config folder."""
    import bcrypt
    import yaml

    from aitax.telemetry.events import INDEX_PREFIX

    users, members = [], {}
    for user, role in elasticsearch_users().items():
        password = (folder / user / PASSWORD_FILE).read_bytes().strip()
        users.append(f"{user}:{bcrypt.hashpw(password, bcrypt.gensalt(rounds=10)).decode()}\n")
        members.setdefault(role, []).append(user)
    return {"users": "".join(users).encode(),
            "users_roles": "".join(f"{role}:{','.join(names)}\n" for role, names in members.items()).encode(),
            "roles.yml": yaml.safe_dump(elasticsearch_roles(f"{INDEX_PREFIX}-*")).encode()}


def identity(principal: str) -> Path:
    """A principal's folder: its certificate, key and the CA's certificate, as a mounted TLS Secret."""
    return pki_dir() / principal


def java_keystore(principal: str) -> Path:
    """Kafka's PEM key store of a Java process: the principal's key, then its certificate."""
    return identity(principal) / KEYSTORE_FILE


def java_client_properties(principal: str) -> dict[str, str]:
    """A Java client's mutual TLS as `principal` (Kafka's tools: `--command-config`)."""
    return {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(java_keystore(principal)), "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(identity(principal) / CA_FILE)}


def elasticsearch_users() -> dict[str, str]:
    """Each principal's Elasticsearch role, by user name (the principal's)."""
    return {ADMIN: SUPERUSER, **{p.name: p.events_role for p in PRINCIPALS}}


def elasticsearch_roles(index_pattern: str) -> dict[str, dict]:
    """The file realm's roles (`roles.yml`) over the event indices. A writer may create the daily index and
    index events into it (ids from content, so a replay overwrites: `index`, not just `create_doc`); `monitor` is
    the health probe a sink uses to notice Elasticsearch is back. It may not read, delete or change templates."""
    return {
        EVENTS_WRITER: {"cluster": ["monitor"],
                        "indices": [{"names": [index_pattern], "privileges": ["create_index", "index"]}]},
        EVENTS_READER: {"cluster": ["monitor"],
                        "indices": [{"names": [index_pattern], "privileges": ["read", "view_index_metadata"]}]},
    }


def acl_bindings(topics: list[tuple[str, str | None]]) -> list:
    """The ACLs of (topic name, the `Topics` field it carries) pairs, and of each principal's consumer groups:
    literal topic names, since an experiment's topics share a prefix, not a suffix."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    def allow(kind: ResourceType, name: str, pattern: ResourcePatternType, principal: str, operation: AclOperation):
        return AclBinding(kind, name, pattern, f"User:{principal}", "*", operation, AclPermissionType.ALLOW)

    bindings = []
    for name, carries in topics:
        for principal in PRINCIPALS:
            if carries in principal.reads:
                bindings.append(allow(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, principal.name,
                                      AclOperation.READ))
            if carries in principal.writes:
                bindings.append(allow(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, principal.name,
                                      AclOperation.WRITE))
    for principal in PRINCIPALS:
        bindings += [allow(ResourceType.GROUP, group, ResourcePatternType.PREFIXED, principal.name, AclOperation.READ)
                     for group in principal.groups]
        if principal.describes_groups:
            bindings.append(allow(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, principal.name,
                                  AclOperation.DESCRIBE))
    return bindings
