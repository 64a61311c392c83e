"""A real single-node Elasticsearch from Maven Central's runnable zip.

Two traps handled here: it refuses to run as root (we drop to an unprivileged user), and the zip lacks the
module serving `GET /`, which the official Python client's `info()`/`ping()` need (we add a tiny plugin).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from aitax.common.daemons import ManagedProcess
from aitax.common.errors import UserError
from aitax.common.paths import downloads_dir, stack_dir
from aitax.pipeline.transport.security import CA_FILE, CERTIFICATE_FILE, KEY_FILE
from aitax.stack.config import ELASTICSEARCH_VERSION, HOST, StackConfig
from aitax.stack.kafka import require_java
from aitax.telemetry.elastic_access import ElasticsearchCredentials, http_options

ARTIFACT = f"org.elasticsearch.distribution.integ-test-zip:elasticsearch:{ELASTICSEARCH_VERSION}:zip"
PLUGIN_SOURCE = Path(__file__).with_name("es_root_plugin")
UNPRIVILEGED_UID = 65534  # nobody


def es_home() -> Path:
    return downloads_dir() / f"elasticsearch-{ELASTICSEARCH_VERSION}"


def state_dir() -> Path:
    return stack_dir() / "elasticsearch"


def process() -> ManagedProcess:
    return ManagedProcess(
        name="elasticsearch",
        pid_file=stack_dir() / "run" / "elasticsearch.pid",
        log_file=state_dir() / "console.log",
        # In every command line of its start-up chain (unshare, the bash script, the Java launcher).
        cmdline_marker=str(es_home()),
    )


def install() -> None:
    """Fetch the zip, unpack it and build the `GET /` plugin into it, once."""
    marker = es_home() / ".complete"
    if marker.exists():
        return
    require_java()
    archive = downloads_dir() / f"elasticsearch-{ELASTICSEARCH_VERSION}.zip"
    if not archive.exists():
        if shutil.which("mvn") is None:
            raise UserError("Maven (`mvn`) not found: run `make setup`, which installs it")
        subprocess.run(
            ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={downloads_dir()}"],
            check=True,
        )
    shutil.rmtree(es_home(), ignore_errors=True)
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(downloads_dir())
    for script in (es_home() / "bin").iterdir():
        script.chmod(0o755)
    _build_root_plugin()
    marker.touch()


def _build_root_plugin() -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise UserError("javac not found: the Elasticsearch `GET /` plugin is compiled at install (`make setup`)")
    plugin_dir = es_home() / "plugins" / "aitax-root-info"
    classes = plugin_dir / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    sources = [str(p) for p in (PLUGIN_SOURCE / "src").rglob("*.java")]
    subprocess.run(
        [javac, "-proc:none", "--release", "17", "-d", str(classes), "-cp", f"{es_home() / 'lib'}/*", *sources],
        check=True,
    )
    subprocess.run(
        ["jar", "--create", "--file", str(plugin_dir / "aitax-root-info.jar"), "-C", str(classes), "."], check=True
    )
    shutil.rmtree(classes)
    descriptor = (PLUGIN_SOURCE / "plugin-descriptor.properties.in").read_text()
    (plugin_dir / "plugin-descriptor.properties").write_text(descriptor.replace("@ES_VERSION@", ELASTICSEARCH_VERSION))


def write_config(config: StackConfig) -> None:
    config_dir = state_dir() / "config"
    if config_dir.exists():
        shutil.rmtree(config_dir)
    shutil.copytree(es_home() / "config", config_dir)
    for sub in ("data", "logs", "tmp"):
        (state_dir() / sub).mkdir(parents=True, exist_ok=True)
    settings = {
        "cluster.name": "aitax",
        "node.name": "aitax-es-1",
        "path.data": str(state_dir() / "data"),
        "path.logs": str(state_dir() / "logs"),
        "network.host": HOST,
        "http.port": config.elasticsearch_port,
        "transport.port": config.elasticsearch_transport_port,
        "discovery.type": "single-node",
        **_security_settings(config, config_dir),
        # A nearly full developer disk must not turn indices read-only in the middle of an experiment.
        "cluster.routing.allocation.disk.threshold_enabled": "false",
        # Tests and `make clean` delete indices by pattern.
        "action.destructive_requires_name": "false",
    }
    (config_dir / "elasticsearch.yml").write_text("".join(f"{k}: {v}\n" for k, v in settings.items()))
    (config_dir / "jvm.options.d").mkdir(exist_ok=True)
    heap = config.elasticsearch_heap_mb
    (config_dir / "jvm.options.d" / "heap.options").write_text(f"-Xms{heap}m\n-Xmx{heap}m\n")
    if os.geteuid() == 0 and not _user_namespaces_work():
        for path in [state_dir(), *state_dir().rglob("*")]:
            os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)


# Elasticsearch's security, locally and in the chart's bundled node (a test keeps the chart's equal): https with the
# certificate in the config folder's certs/, and the file realm alone (every user is a principal of
# `stack.security`, none made at run time).
SECURITY_SETTINGS = {
    "xpack.security.enabled": "true",
    "xpack.security.http.ssl.enabled": "true",
    "xpack.security.http.ssl.key": f"certs/{KEY_FILE}",
    "xpack.security.http.ssl.certificate": f"certs/{CERTIFICATE_FILE}",
    "xpack.security.http.ssl.certificate_authorities": f"certs/{CA_FILE}",
    "xpack.security.authc.realms.file.file1.order": "0",
}


def _security_settings(config: StackConfig, config_dir: Path) -> dict[str, str]:
    """https with the stack CA's certificate, and a file-realm user and role per principal (`stack.security`). The
    node reads its certificate and users only inside its config folder, so they are copied there."""
    if not config.elasticsearch_tls:
        return {"xpack.security.enabled": "false"}
    from aitax.stack import security
    from aitax.stack.pki import write_private

    certificates = config_dir / "certs"
    certificates.mkdir(mode=0o700)
    server = security.identity(security.ELASTICSEARCH)
    for name in (CA_FILE, CERTIFICATE_FILE, KEY_FILE):
        write_private(certificates / name, (server / name).read_bytes())
    for name, content in security.file_realm(security.pki_dir()).items():
        write_private(config_dir / name, content)
    return SECURITY_SETTINGS


def admin_credentials(config: StackConfig) -> ElasticsearchCredentials | None:
    """The stack's own checks and set-up run as its admin when Elasticsearch is secured."""
    from aitax.stack.security import ADMIN, identity

    return ElasticsearchCredentials(identity(ADMIN)) if config.elasticsearch_tls else None


def start(config: StackConfig) -> None:
    java_home = Path(require_java()).resolve().parent.parent
    argv = [str(es_home() / "bin" / "elasticsearch")]
    if os.geteuid() == 0:
        argv = [*_unprivileged_prefix(), *argv]
    env = {
        "ES_JAVA_HOME": str(java_home),
        "ES_PATH_CONF": str(state_dir() / "config"),
        "ES_TMPDIR": str(state_dir() / "tmp"),
        "ES_JAVA_OPTS": "",
    }
    process().start(argv, env=env, cwd=state_dir())


@functools.cache
def _user_namespaces_work() -> bool:
    try:
        probe = ["unshare", "--user", f"--map-user={UNPRIVILEGED_UID}", "true"]
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _unprivileged_prefix() -> list[str]:
    """Elasticsearch refuses to run as root.

    Preferred: a user namespace where it is `nobody` but its files are still root's outside, so it reaches a
    checkout under a private (0700) directory and leaves no foreign-owned files. Fallback: drop to `nobody`
    with `setpriv` (its state folder was chowned; every parent folder must be world-traversable).
    """
    if _user_namespaces_work():
        return ["unshare", "--user", f"--map-user={UNPRIVILEGED_UID}", f"--map-group={UNPRIVILEGED_UID}", "--"]
    blocked = [p for p in state_dir().parents if not os.stat(p).st_mode & 0o001]
    if blocked:
        raise UserError(
            f"Elasticsearch must run unprivileged and cannot reach {state_dir()}: {blocked[0]} is not "
            "world-traversable; set AITAX_HOME to a folder under a traversable path"
        )
    return ["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}", "--clear-groups"]


def health(config: StackConfig) -> str | None:
    """Cluster health colour, or None when the server does not answer."""
    import requests

    try:
        response = requests.get(f"{config.elasticsearch_url}/_cluster/health", timeout=2,
                                **http_options(admin_credentials(config)))
        return response.json().get("status") if response.ok else None
    except requests.RequestException:
        return None
