"""Who may do what on the local stack's Kafka: a principal per stage, each allowed only what its stage needs.

A principal is the CN of its certificate (`stack.pki`); the brokers and the admin (topic creation, ACLs, the stack's
own checks) are super users, every other principal holds only the ACLs below. A topic's ACLs are granted when it is
created (`grant`), so an experiment's prefixed topics get the same rules as the pipeline's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.paths import stack_dir
from stack.config import HOST
from stack.pki import Identity, ensure_identities

BROKER = "broker"
ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    name: str
    reads: tuple[str, ...] = ()  # `pipeline.schema.Topics` fields it consumes
    writes: tuple[str, ...] = ()  # fields it produces to
    groups: tuple[str, ...] = ()  # consumer group name prefixes it may join


# One principal per stage, as the issue's table of least privilege: a stage reads what it consumes and writes what
# it produces and its dead letters, nothing more.
PRINCIPALS = (
    Principal("ingest-detect", writes=("faces", "dlq")),
    Principal("ingest", writes=("frames",)),
    Principal("detect", reads=("frames",), writes=("faces", "dlq"), groups=("detect",)),
    Principal("detect-objects", reads=("frames",), writes=("detections", "dlq"), groups=("detect-objects",)),
    Principal("identify", reads=("faces",), writes=("identities", "dlq"), groups=("identify",)),
    # read-back, audit and collect: every topic, nothing written
    Principal("reader", reads=("faces", "identities", "dlq", "frames", "detections"), groups=("aitax-",)),
)


def pki_dir() -> Path:
    return stack_dir() / "pki"


def issue_identities() -> None:
    """Every principal's certificate and key (made at the first `stack up`, renewed near expiry), and the brokers'
    PEM key store."""
    made = ensure_identities(pki_dir(), {BROKER: (HOST, "localhost"), ADMIN: (), **{p.name: () for p in PRINCIPALS}})
    broker = made[BROKER]
    keystore = broker_keystore()
    keystore.touch(mode=0o600)
    keystore.write_bytes(broker.key.read_bytes() + broker.certificate.read_bytes())


def identity(principal: str) -> Identity:
    return Identity(pki_dir() / principal)


def broker_keystore() -> Path:
    """Kafka's PEM key store: the brokers' key, then its certificate."""
    return identity(BROKER).folder / "keystore.pem"


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
    return bindings
