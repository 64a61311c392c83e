"""A Kafka client's identity: mutual TLS from a folder laid out as a mounted Kubernetes TLS Secret (`ca.crt`,
`tls.crt`, `tls.key`), in each client library's own settings. The folder is named by $AITAX_KAFKA_TLS in a pod, or
by the local stack for the principal a command runs as."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError

TLS_ENV = "AITAX_KAFKA_TLS"
FILES = ("ca.crt", "tls.crt", "tls.key")


@dataclass(frozen=True)
class KafkaTls:
    folder: Path

    def __post_init__(self) -> None:
        missing = [name for name in FILES if not (self.folder / name).is_file()]
        if missing:
            raise UserError(f"Kafka TLS identity {self.folder}: no {', '.join(missing)} (a TLS Secret's files)")

    @property
    def ca(self) -> str:
        return str(self.folder / "ca.crt")

    @property
    def certificate(self) -> str:
        return str(self.folder / "tls.crt")

    @property
    def key(self) -> str:
        return str(self.folder / "tls.key")

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
