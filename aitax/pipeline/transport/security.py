"""A Kafka client's identity: mutual TLS from a folder laid out as a mounted Kubernetes TLS Secret (`ca.crt`,
`tls.crt`, `tls.key`), in each client library's own settings. The folder is named by $AITAX_KAFKA_TLS in a pod, or
by the local stack for the principal a command runs as."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from aitax.common.errors import UserError

TLS_ENV = "AITAX_KAFKA_TLS"
# The principal that reads results back (read-back, audit, collect, the report), and where the chart's consumer pods
# hold its identity beside their own: an experiment's read-back runs there as the reader (aitax/stack/security.py)
READER, READER_MOUNT = "reader", "/etc/aitax/reader"
# A Kubernetes TLS Secret's keys, as files in the folder it is mounted at
CA_FILE, CERTIFICATE_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"


@dataclass(frozen=True)
class KafkaTls:
    folder: Path

    def __post_init__(self) -> None:
        missing = [name for name in (CA_FILE, CERTIFICATE_FILE, KEY_FILE) if not (self.folder / name).is_file()]
        if missing:
            raise UserError(f"Kafka TLS identity {self.folder}: no {', '.join(missing)} (a TLS Secret's files)")

    @property
    def ca(self) -> str:
        return str(self.folder / CA_FILE)

    @property
    def certificate(self) -> str:
        return str(self.folder / CERTIFICATE_FILE)

    @property
    def key(self) -> str:
        return str(self.folder / KEY_FILE)

    def confluent(self) -> dict[str, str]:
        """librdkafka's settings (confluent-kafka); it checks the broker's name against its certificate."""
        return {"security.protocol": "SSL", "ssl.ca.location": self.ca, "ssl.certificate.location": self.certificate,
                "ssl.key.location": self.key, "ssl.endpoint.identification.algorithm": "https"}

    def kafka_python(self) -> dict[str, object]:
        return {"security_protocol": "SSL", "ssl_cafile": self.ca, "ssl_certfile": self.certificate,
                "ssl_keyfile": self.key, "ssl_check_hostname": True}


def tls_from_environment() -> KafkaTls | None:
    folder = os.environ.get(TLS_ENV)
    return KafkaTls(Path(folder)) if folder else None


def librdkafka_settings(bootstrap: str, settings: Mapping[str, object] = MappingProxyType({})) -> dict[str, object]:
    """A confluent-kafka client's settings: the brokers, this process's identity ($AITAX_KAFKA_TLS), `settings`."""
    tls = tls_from_environment()
    return {"bootstrap.servers": bootstrap, **(tls.confluent() if tls else {}), **settings}


def kafka_python_settings() -> dict[str, object]:
    """kafka-python's settings of this process's identity ($AITAX_KAFKA_TLS)."""
    tls = tls_from_environment()
    return tls.kafka_python() if tls else {}
