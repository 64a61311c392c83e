"""Who may do what on the local stack's Kafka: a principal per stage, each allowed only what its stage needs.

A principal is the CN of its certificate (`stack.pki`); the brokers and the admin (topic creation, ACLs, the stack's
own checks) are super users, every other principal holds only the ACLs below. A topic's ACLs are granted when it is
created (`acl_bindings`, from `stack.kafka.ensure_topics`), so an experiment's prefixed topics get the same rules as
the pipeline's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.paths import stack_dir
from pipeline.transport.security import CA_FILE, CERTIFICATE_FILE, KEY_FILE
from stack.config import HOST

BROKER = "broker"
ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    name: str
    reads: tuple[str, ...] = ()  # `pipeline.schema.Topics` fields it consumes
    writes: tuple[str, ...] = ()  # fields it produces to
    groups: tuple[str, ...] = ()  # consumer group name prefixes it may join
    describes_groups: bool = False  # may read every group's committed offsets (a stage's lag)


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
    Principal("reader", reads=("faces", "identities", "dlq", "frames", "detections"), groups=("readback-", "aitax-"),
              describes_groups=True),
)

# The principal each `aitax` command runs as on the local stack; any other command is the operator's (admin): it
# creates topics, starts the stages and reads their results back.
COMMAND_PRINCIPALS = {
    "ingest-detect": "ingest-detect", "ingest": "ingest-detect", "emulate-producers": "load-generator",
    "detect": "detect", "emulate-detectors": "detect",
    "detect-objects": "detect-objects",
    "identify": "identify", "emulate-consumers": "identify",
    "audit": "reader", "collect": "reader",
}


def pki_dir() -> Path:
    return stack_dir() / "pki"


def issue_identities() -> None:
    """Every principal's certificate and key (made at the first `stack up`, renewed near expiry), and the brokers'
    PEM key store."""
    from stack.pki import ensure_identities  # `cryptography`: only where certificates are made

    ensure_identities(pki_dir(), {BROKER: (HOST, "localhost"), ADMIN: (), **{p.name: () for p in PRINCIPALS}})
    for java_user in (BROKER, ADMIN):  # the brokers, and Kafka's own tools run as the admin
        own = identity(java_user)
        keystore = java_keystore(java_user)
        keystore.touch(mode=0o600)
        keystore.write_bytes((own / KEY_FILE).read_bytes() + (own / CERTIFICATE_FILE).read_bytes())


def identity(principal: str) -> Path:
    """A principal's folder: its certificate, key and the CA's certificate, as a mounted TLS Secret."""
    return pki_dir() / principal


def java_keystore(principal: str) -> Path:
    """Kafka's PEM key store of a Java process: the principal's key, then its certificate."""
    return identity(principal) / "keystore.pem"


def java_client_properties(principal: str) -> dict[str, str]:
    """A Java client's mutual TLS as `principal` (Kafka's tools: `--command-config`)."""
    return {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(java_keystore(principal)), "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(identity(principal) / CA_FILE)}


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
