"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager and kube-scheduler.
The chart's tests run it with kwok simulating 3 nodes (pods do not run, but every API object, controller,
scheduler decision, PVC binding and rollout is real); `aitax cluster` (`node.py`) runs it for its real nodes.

Binaries come from scripts/install-k8s-tools.sh (.aitax/tools/bin); state, certificates, logs and PID files live
under $AITAX_HOME/k8s. Ports are offsets from AITAX_PORT_BASE (default 19000) like the local stack's:
apiserver base+443, etcd base+479/480, kwok base+447, controller-manager base+457, scheduler base+459.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aitax.common.daemons import ManagedProcess, poll_until, port_is_open, require_free_port, wait_until
from aitax.common.errors import UserError
from aitax.common.paths import PROJECT_ROOT, aitax_home

TOOLS_DIR = PROJECT_ROOT / ".aitax" / "tools"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl", "helm")
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
START_TIMEOUT_S = 90
SERVICE_CIDR = "10.96.0.0/16"  # the API server's Service range (10.96.0.1 is `kubernetes.default`)
# kwok ships stages for nodes, pods and volumes; pods of `helm test` need one more (see HELM_TEST_STAGE).
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat/node-heartbeat.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
    "volume/fast/pvc-provision.yaml",
    "volume/fast/pv-bind.yaml",
    "volume/fast/pvc-delete.yaml",
    "volume/fast/pv-delete.yaml",
)
# kwok completes only pods owned by Jobs; a `helm test` pod (annotation helm.sh/hook: test) must succeed as well.
HELM_TEST_STAGE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete-helm-test
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.annotations["helm.sh/hook"]'
      operator: 'In'
      values: ['test']
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Succeeded
"""
STORAGE_CLASS = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: kwok-volume
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kwok.x-k8s.io/volume
reclaimPolicy: Delete
volumeBindingMode: Immediate
"""


def tool(name: str) -> Path:
    path = TOOLS_DIR / "bin" / name
    if not os.access(path, os.X_OK):
        raise UserError(f"{path} not found: run `bash scripts/install-k8s-tools.sh` (or `make setup`)")
    return path


@dataclass(frozen=True)
class LocalControlPlane:
    nodes: int = 3
    port_base: int = int(os.environ.get("AITAX_PORT_BASE", "19000"))

    @property
    def home(self) -> Path:
        return aitax_home() / "k8s"

    @property
    def apiserver_port(self) -> int:
        return self.port_base + 443

    @property
    def etcd_port(self) -> int:
        return self.port_base + 479

    @property
    def controller_manager_port(self) -> int:
        return self.port_base + 457

    @property
    def scheduler_port(self) -> int:
        return self.port_base + 459

    @property
    def kubeconfig(self) -> Path:
        return self.home / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    def _process(self, name: str) -> ManagedProcess:
        return ManagedProcess(name=name, pid_file=self.home / "run" / f"{name}.pid",
                              log_file=self.home / "logs" / f"{name}.log", cmdline_marker=str(self.home))

    @property
    def processes(self) -> list[ManagedProcess]:
        return [self._process(name) for name in ("etcd", "kube-apiserver", "kube-controller-manager",
                                                 "kube-scheduler", "kwok")]

    def is_running(self) -> bool:
        return all(p.is_running() for p in self.processes) and port_is_open(self.apiserver_port)

    def up(self, fresh: bool = True) -> None:
        """Start every component (a fresh etcd by default) and wait until the fake nodes are Ready."""
        for name in BINARIES:
            tool(name)
        if self.is_running():
            return
        self.down()
        if fresh:
            shutil.rmtree(self.home / "etcd", ignore_errors=True)
        for port, what in ((self.apiserver_port, "kube-apiserver"), (self.etcd_port, "etcd"),
                           (self.controller_manager_port, "kube-controller-manager"),
                           (self.scheduler_port, "kube-scheduler")):
            require_free_port(port, what)
        self._write_credentials()
        try:
            self._start_components()
        except BaseException:
            self.down()  # a half-started control plane must not outlive the failed start
            raise

    def _start_components(self) -> None:
        self._start_etcd()
        self._start_apiserver()
        self._start("kube-controller-manager", [
            str(tool("kube-controller-manager")), f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={self.controller_manager_port}", "--leader-elect=false",
            f"--service-account-private-key-file={self.home / 'pki' / 'sa.key'}",
            f"--root-ca-file={self.home / 'pki' / 'ca.crt'}", "--use-service-account-credentials=true",
            # Few threads: the machine has two shared cores.
            "--concurrent-deployment-syncs=2", "--concurrent-statefulset-syncs=2",
            *self._controller_manager_args(),
        ])
        self._start("kube-scheduler", [
            str(tool("kube-scheduler")), f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={self.scheduler_port}", "--leader-elect=false",
        ])
        self._start_nodes()

    # --- what a subclass with real nodes changes ----------------------------------------------------------------

    #: Addresses in the API server's serving certificate besides 127.0.0.1 and the `kubernetes` Service's.
    extra_serving_ips: tuple[str, ...] = ()

    def _extra_tokens(self) -> list[str]:
        """More lines of the static token file (`token,user,uid,"group"`): node agents' identities."""
        return []

    def _apiserver_args(self) -> list[str]:
        # One control plane on loopback: no endpoint reconciliation, no priority-and-fairness bookkeeping.
        return ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--authorization-mode=RBAC",
                "--endpoint-reconciler-type=none", "--enable-priority-and-fairness=false"]

    def _controller_manager_args(self) -> list[str]:
        return []

    def _start_nodes(self) -> None:
        self._start_kwok()
        self._create_nodes_and_storage()

    def down(self) -> None:
        for process in reversed(self.processes):
            process.stop(timeout_s=20)

    def apply_when_accepted(self, manifest: Path, timeout_s: float) -> None:
        """`kubectl apply` until the API server takes it: it may still be installing its built-in RBAC roles for
        a few seconds after /readyz. A refusal that outlasts `timeout_s` is kubectl's own error."""
        accepted = poll_until(lambda: self.kubectl("apply", "-f", str(manifest), check=False).returncode == 0,
                              timeout_s, interval_s=1.0)
        if not accepted:
            self.kubectl("apply", "-f", str(manifest))

    def kubectl_argv(self) -> list[str]:
        """kubectl as this cluster's admin, for a command that runs beside this process."""
        return [str(tool("kubectl")), f"--kubeconfig={self.kubeconfig}"]

    @contextlib.contextmanager
    def forwarded(self, namespace: str, target: str, port: int, timeout_s: float = 20) -> Iterator[int]:
        """`kubectl port-forward`: a local port that reaches `port` inside the pod behind `target` (svc/NAME,
        pod/NAME) through the API server and the pod's kubelet, as a user's laptop would, whichever node the pod
        is on and whatever its NetworkPolicy admits from the nodes."""
        forward = subprocess.Popen([*self.kubectl_argv(), "port-forward", "-n", namespace, target, f":{port}",
                                    "--address=127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready = select.select([forward.stdout], [], [], timeout_s)[0]
            line = forward.stdout.readline() if ready else ""
            match = re.search(r"127\.0\.0\.1:(\d+) ->", line)
            if not match:
                forward.kill()
                raise UserError(f"kubectl port-forward {target} :{port} in {namespace}: "
                                f"{(line + forward.stderr.read()).strip()[-300:] or 'no port within the timeout'}")
            yield int(match.group(1))
        finally:
            forward.terminate()
            forward.wait(timeout=10)

    def kubectl(self, *args: str, check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess:
        result = subprocess.run([*self.kubectl_argv(), *args], capture_output=True, text=True, timeout=timeout_s)
        if check and result.returncode != 0:
            raise UserError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()[-400:]}")
        return result

    # --- internals --------------------------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str]) -> ManagedProcess:
        process = self._process(name)
        process.start(argv, cwd=self.home)
        return process

    def _write_credentials(self) -> None:
        """A CA, a serving certificate for 127.0.0.1, a service-account key pair and an admin token."""
        pki = self.home / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        if not (pki / "apiserver.crt").exists():
            openssl = shutil.which("openssl")
            if openssl is None:
                raise UserError("openssl not found: it makes the local API server's certificates "
                                "(apt-get install openssl)")

            def run(*args: str) -> None:
                subprocess.run([openssl, *args], cwd=pki, check=True, capture_output=True)

            run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                "-days", "3650", "-subj", "/CN=aitax-local-ca")
            extra_ips = "".join(f",IP:{ip}" for ip in self.extra_serving_ips)
            (pki / "san.cnf").write_text(
                "[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=IP:127.0.0.1,DNS:localhost,"
                f"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1{extra_ips}\n"
                "extendedKeyUsage=serverAuth\n")
            run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
                "-subj", "/CN=kube-apiserver")
            run("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "apiserver.crt", "-days", "3650", "-extfile", "san.cnf", "-extensions", "ext")
            run("genrsa", "-out", "sa.key", "2048")
            run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
            token = os.urandom(24).hex()
            (pki / "tokens.csv").write_text("".join(f"{line}\n" for line in [
                f'{token},admin,admin,"system:masters"', *self._extra_tokens()]))
            for name in ("ca.key", "apiserver.key", "sa.key", "tokens.csv"):
                (pki / name).chmod(0o600)
        token = (pki / "tokens.csv").read_text().split(",", 1)[0]
        self.kubeconfig.write_text(f"""\
apiVersion: v1
kind: Config
clusters:
- name: aitax-local
  cluster:
    server: {self.server}
    certificate-authority: {pki / 'ca.crt'}
users:
- name: admin
  user:
    token: {token}
contexts:
- name: aitax-local
  context:
    cluster: aitax-local
    user: admin
    namespace: default
current-context: aitax-local
""")
        self.kubeconfig.chmod(0o600)

    def _start_etcd(self) -> None:
        data = self.home / "etcd"
        process = self._start("etcd", [
            str(tool("etcd")), "--name=aitax-local", f"--data-dir={data}",
            f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{self.etcd_port + 1}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{self.etcd_port + 1}",
            f"--initial-cluster=aitax-local=http://127.0.0.1:{self.etcd_port + 1}",
            "--log-level=warn", "--quota-backend-bytes=1073741824",
            # Tests do not need fsync durability; the disk is shared with other work.
            "--unsafe-no-fsync",
        ])
        wait_until(lambda: port_is_open(self.etcd_port), START_TIMEOUT_S, "etcd", process)

    def _start_apiserver(self) -> None:
        pki = self.home / "pki"
        process = self._start("kube-apiserver", [
            str(tool("kube-apiserver")), f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={pki / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", *self._apiserver_args(),
        ])
        wait_until(self._api_ready, START_TIMEOUT_S, "kube-apiserver", process)

    def _api_ready(self) -> bool:
        if not port_is_open(self.apiserver_port):
            return False
        return self.kubectl("get", "--raw", "/readyz", check=False, timeout_s=10).returncode == 0

    def _start_kwok(self) -> None:
        stage_root = TOOLS_DIR / "kwok-stage"
        documents = [(stage_root / relative).read_text() for relative in KWOK_STAGE_FILES]
        config = self.home / "kwok-stages.yaml"
        config.write_text("\n---\n".join([*documents, HELM_TEST_STAGE]))
        self._start("kwok", [
            str(tool("kwok")), f"--kubeconfig={self.kubeconfig}", f"--config={config}",
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
            "--cidr=10.0.0.1/16", "--node-ip=10.0.0.1", f"--server-address=127.0.0.1:{self.port_base + 447}",
        ])

    def _create_nodes_and_storage(self) -> None:
        nodes = "\n---\n".join(f"""\
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-{index}
  annotations:
    {FAKE_NODE_ANNOTATION}: fake
  labels:
    kubernetes.io/hostname: kwok-node-{index}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {{cpu: "32", memory: 256Gi, pods: "110", ephemeral-storage: 1Ti}}
  capacity: {{cpu: "32", memory: 256Gi, pods: "110", ephemeral-storage: 1Ti}}
""" for index in range(self.nodes))
        manifest = self.home / "nodes.yaml"
        manifest.write_text(nodes + "\n---\n" + STORAGE_CLASS)
        self.apply_when_accepted(manifest, START_TIMEOUT_S)
        wait_until(self._nodes_ready, START_TIMEOUT_S, f"{self.nodes} kwok nodes", self._process("kwok"))

    def _nodes_ready(self) -> bool:
        result = self.kubectl("get", "nodes", "-o",
                              "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status}{'\\n'}{end}",
                              check=False, timeout_s=10)
        return result.returncode == 0 and result.stdout.split().count("True") == self.nodes
