"""An Elasticsearch client's credential: a user and password from a folder laid out as a mounted Kubernetes
basic-auth Secret (`username`, `password`), with the CA that signed the server's certificate (`ca.crt`) beside them.
The folder is named by $AITAX_ELASTICSEARCH_CREDENTIALS in a pod, or by the local stack for the principal a command
runs as. Every Elasticsearch request in aitax (the event sinks, the report, experiment results, the stack's checks)
goes through `client` or `http_options`, so none of them sends events anywhere without it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from aitax.common.errors import UserError

CREDENTIALS_ENV = "AITAX_ELASTICSEARCH_CREDENTIALS"
# A basic-auth Secret's keys, and a TLS Secret's CA, as files in the folder they are mounted at
USERNAME_FILE, PASSWORD_FILE, CA_FILE = "username", "password", "ca.crt"


@dataclass(frozen=True)
class ElasticsearchCredentials:
    folder: Path

    def __post_init__(self) -> None:
        missing = [name for name in (USERNAME_FILE, PASSWORD_FILE) if not (self.folder / name).is_file()]
        if missing:
            raise UserError(f"Elasticsearch credentials {self.folder}: no {', '.join(missing)} "
                            "(a basic-auth Secret's files)")

    @property
    def username(self) -> str:
        return (self.folder / USERNAME_FILE).read_text().strip()

    def basic_auth(self) -> tuple[str, str]:
        return self.username, (self.folder / PASSWORD_FILE).read_text().strip()

    @property
    def ca(self) -> str | None:
        """The CA to check an https server against; without one, the system's trust store."""
        ca = self.folder / CA_FILE
        return str(ca) if ca.is_file() else None


def credentials_from_environment() -> ElasticsearchCredentials | None:
    folder = os.environ.get(CREDENTIALS_ENV)
    return ElasticsearchCredentials(Path(folder)) if folder else None


def redacted(url: str) -> str:
    """`url` without a user and password in it (an external Elasticsearch's URL may carry them, from the chart's
    `elasticsearch.external.existingSecret`): what a message, a log line or a page shows."""
    parts = urlsplit(url)
    if not parts.username and not parts.password:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def usable_url(url: str, credentials: ElasticsearchCredentials | None = None) -> str:
    """`url` with its port spelt out, or one line on what makes it unusable: a scheme other than http(s), no host, a
    port out of range, or plain http while the credentials hold a CA (the server speaks TLS; the official client
    would end in a traceback, and the password would travel in the clear). A user and password in the URL are kept
    for the connection and never shown."""
    parts = urlsplit(url.strip())
    url = redacted(url.strip())
    if parts.scheme not in ("http", "https"):
        raise UserError(f"Elasticsearch URL {url!r}: the scheme must be http:// or https://, not "
                        f"{parts.scheme + '://' if parts.scheme else 'missing'}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UserError(f"Elasticsearch URL {url!r}: the port is not a number from 1 to 65535") from None
    if not parts.hostname:
        raise UserError(f"Elasticsearch URL {url!r}: no host")
    credentials = credentials or credentials_from_environment()
    if parts.scheme == "http" and credentials is not None and credentials.ca:
        raise UserError(f"Elasticsearch URL {url!r}: plain http, but the credentials in {credentials.folder} are for "
                        "a TLS server (they hold its CA); give https://")
    user = parts.netloc.rpartition("@")[0]
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{user + '@' if user else ''}{host}:{port}{parts.path.rstrip('/')}"


def client(url: str, credentials: ElasticsearchCredentials | None = None, **options: Any):
    """The official client for `url`, as `credentials` (default: this process's, $AITAX_ELASTICSEARCH_CREDENTIALS)."""
    from elasticsearch import Elasticsearch

    credentials = credentials or credentials_from_environment()
    url = usable_url(url, credentials)
    if credentials is not None:
        options = {"basic_auth": credentials.basic_auth(), **({"ca_certs": credentials.ca} if credentials.ca else {}),
                   **options}
    return Elasticsearch(url, **options)


def http_options(credentials: ElasticsearchCredentials | None = None) -> dict[str, Any]:
    """`requests` keyword arguments for the same identity: the user, and the CA to verify the server with."""
    credentials = credentials or credentials_from_environment()
    if credentials is None:
        return {}
    return {"auth": credentials.basic_auth(), **({"verify": credentials.ca} if credentials.ca else {})}


def refusal(url: str, status: int | None, credentials: ElasticsearchCredentials | None = None) -> str | None:
    """A one-line reason for an authentication (401) or authorization (403) refusal, naming the credential sent
    (default: this process's)."""
    if status not in (401, 403):
        return None
    credentials = credentials or credentials_from_environment()
    who = f"the credentials in {credentials.folder}" if credentials else f"no credentials (${CREDENTIALS_ENV} unset)"
    verdict = "refused" if status == 401 else "does not allow this request for"
    return f"Elasticsearch at {redacted(url)} {verdict} {who} ({status})"
