"""A release's identities as Kubernetes Secrets, made by the chart's pre-install/pre-upgrade Job in the release's
namespace: the same CA, certificates, passwords and Elasticsearch file realm the local stack makes
(`stack.security.issue_identities`), one Secret per principal laid out as the local principal folders are
(`ca.crt`, `tls.crt`, `tls.key`, `username`, `password`, and `keystore.pem` for the Java ones).

Secrets that exist are kept (a user's own, or an earlier install's); missing or expiring ones are made; the CA's key
stays in its own Secret, read by this Job only. Rotation: delete the Secrets and run `helm upgrade`. The Job talks to
the API server with its service account's token: no client library, three REST calls per Secret.
"""

from __future__ import annotations

import base64
import tempfile
from dataclasses import dataclass
from pathlib import Path

from aitax.common.errors import UserError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
API_SERVER = "https://kubernetes.default.svc"
CA_SECRET = "ca"  # the Secret `<prefix>-ca`: the CA's certificate and key
REALM_SECRET = "elasticsearch-realm"  # the bundled Elasticsearch's users, roles and their bcrypt hashes
CA_FILES = ("ca.crt", "ca.key")
PASSWORDS_DIGEST = "passwords.sha256"  # in the realm's Secret: which passwords its hashes are of


@dataclass(frozen=True)
class SecretsApi:
    """The namespace's Secrets over the API server's REST interface, as this pod's service account."""

    namespace: str
    server: str = API_SERVER
    account: Path = SERVICE_ACCOUNT

    def _request(self, method: str, path: str, body: dict | None = None):
        import requests

        token = (self.account / "token").read_text().strip()
        url = f"{self.server}/api/v1/namespaces/{self.namespace}/secrets{path}"
        response = requests.request(method, url, json=body, timeout=30, verify=str(self.account / "ca.crt"),
                                    headers={"Authorization": f"Bearer {token}"})
        if response.status_code >= 400 and not (method == "GET" and response.status_code == 404):
            raise UserError(f"secrets in namespace {self.namespace}: {method} {path or '/'} answered "
                            f"{response.status_code} ({response.json().get('reason', '') if response.text else ''})")
        return response

    def read(self, name: str) -> dict[str, bytes] | None:
        response = self._request("GET", f"/{name}")
        if response.status_code == 404:
            return None
        return {key: base64.b64decode(value) for key, value in (response.json().get("data") or {}).items()}

    def write(self, name: str, data: dict[str, bytes], labels: dict[str, str], exists: bool) -> None:
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
                "data": {key: base64.b64encode(value).decode() for key, value in data.items()}}
        if exists:
            self._request("PUT", f"/{name}", body)
        else:
            self._request("POST", "", body)


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def _restore(folder: Path, data: dict[str, bytes]) -> None:
    from aitax.stack.pki import write_private

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, content in data.items():
        write_private(folder / name, content)


def _passwords_digest(folder: Path) -> bytes:
    import hashlib

    from aitax.stack.security import elasticsearch_users
    from aitax.telemetry.elastic_access import PASSWORD_FILE

    digest = hashlib.sha256()
    for user in sorted(elasticsearch_users()):
        digest.update(user.encode() + b"\0" + (folder / user / PASSWORD_FILE).read_bytes().strip() + b"\0")
    return digest.hexdigest().encode()


def ensure_release_secrets(api: SecretsApi, prefix: str, servers: dict[str, tuple[str, ...]],
                           labels: dict[str, str], progress=print) -> list[str]:
    """Every principal's Secret `<prefix>-<principal>`, the CA's and the Elasticsearch realm's; returns the names
    of those made or renewed."""
    from aitax.stack import security

    principals = [*servers, security.ADMIN, *(p.name for p in security.PRINCIPALS)]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "pki"
        existing: dict[str, dict[str, bytes] | None] = {}
        for name in (CA_SECRET, *principals):
            existing[name] = api.read(f"{prefix}-{name}")
            if existing[name]:
                _restore(folder if name == CA_SECRET else folder / name, existing[name])
        security.issue_identities(folder, servers)
        written = []
        for name in (CA_SECRET, *principals):
            data = ({file: (folder / file).read_bytes() for file in CA_FILES} if name == CA_SECRET
                    else _files(folder / name))
            if data != existing[name]:
                api.write(f"{prefix}-{name}", data, labels, exists=existing[name] is not None)
                written.append(f"{prefix}-{name}")
        realm, current = f"{prefix}-{REALM_SECRET}", api.read(f"{prefix}-{REALM_SECRET}")
        # The realm holds bcrypt hashes, new salts on every run: made again only when a password changed (one made
        # here, or one a user supplied), which a digest of them all tells.
        digest = _passwords_digest(folder)
        if current is None or current.get(PASSWORDS_DIGEST) != digest:
            api.write(realm, {**security.file_realm(folder), PASSWORDS_DIGEST: digest}, labels,
                      exists=current is not None)
            written.append(realm)
    for name in written:
        progress(f"secret {name}: made")
    progress(f"{len(principals) + 2 - len(written)} secret(s) kept as they were")
    return written


def namespace() -> str:
    """The pod's own namespace, from its service account."""
    path = SERVICE_ACCOUNT / "namespace"
    if not path.exists():
        raise UserError(f"{path}: not in a pod with a service account token (this runs as the chart's Job)")
    return path.read_text().strip()
