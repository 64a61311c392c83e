"""A real single-node Kubernetes on this machine: the control plane of `LocalControlPlane`, plus containerd + runc
(pods are Linux containers with cgroup limits), kubelet, kube-proxy (iptables Services), CoreDNS, kube-router as
the NetworkPolicy firewall (iptables + ipsets; it neither routes nor proxies) and a host-path volume provisioner,
all as host processes under $AITAX_HOME/cluster.

Networking: a Linux bridge `aitax0` holds the node address 10.244.0.1 (no traffic leaves through the machine's own
interfaces); pods get 10.244.0.0/24 from the CNI bridge plugin; the API server, kubelet and CoreDNS listen on the
node address only. Services are 10.96.0.0/16 (kube-proxy, iptables mode); cluster DNS is CoreDNS on 10.244.0.1:53.

`down` removes every pod first (kubelet tears down their containers and networks), stops every process, then
sweeps what a crash could leave: containerd shims, mounts, network namespaces, the bridge, iptables chains
(KUBE-*, CNI-*), kube-router's ipsets and the kubepods cgroups. `leftovers()` lists whatever is still there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from cluster import images
from cluster.k8s import SERVICE_CIDR, LocalControlPlane, tool
from common.daemons import ManagedProcess, poll_until, port_is_open, wait_until
from common.errors import UserError
from common.paths import aitax_home

NODE_NAME = "aitax-node"
BRIDGE = "aitax0"
NODE_IP = "10.244.0.1"
POD_SUBNET = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
NETNS_DIR = Path("/var/run/netns")
IPTABLES_TABLES = ("filter", "nat", "mangle")
CHAIN_PREFIXES = ("KUBE-", "CNI-")
IPSET_PREFIXES = ("KUBE-", "kube-router-", "TMP-", "inet6:KUBE-", "inet6:kube-router-")  # kube-router's sets
CGROUP_ROOT = Path("/sys/fs/cgroup")
STORAGE_CLASS = "aitax-local"
NODE_READY_TIMEOUT_S = 180
POD_TEARDOWN_TIMEOUT_S = 90


@dataclass(frozen=True)
class RealCluster(LocalControlPlane):
    nodes: int = 1
    extra_serving_ips: tuple[str, ...] = (NODE_IP,)

    @property
    def home(self) -> Path:
        return aitax_home() / "cluster"

    @property
    def apiserver_port(self) -> int:
        return self.port_base + 643

    @property
    def etcd_port(self) -> int:
        return self.port_base + 679

    @property
    def controller_manager_port(self) -> int:  # not the kwok test plane's: both run in one `make test`
        return self.port_base + 657

    @property
    def scheduler_port(self) -> int:
        return self.port_base + 659

    @property
    def kubelet_port(self) -> int:
        return self.port_base + 650

    @property
    def server(self) -> str:
        return f"https://{NODE_IP}:{self.apiserver_port}"

    @property
    def containerd_socket(self) -> Path:
        return self.home / "containerd" / "containerd.sock"

    @property
    def processes(self) -> list[ManagedProcess]:
        return [self._process(name) for name in ("containerd", "etcd", "kube-apiserver", "kube-controller-manager",
                                                 "kube-scheduler", "kubelet", "kube-proxy", "kube-router",
                                                 "coredns", "provisioner")]

    def is_running(self) -> bool:
        return all(p.is_running() for p in self.processes) and port_is_open(self.apiserver_port, host=NODE_IP)

    # --- up -----------------------------------------------------------------------------------------------------

    def up(self, fresh: bool = False) -> None:
        """Start everything (keeping etcd's state, the images and volumes unless `fresh`) and wait for a Ready
        node, CoreDNS and the default StorageClass. Needs root: it creates a bridge, iptables rules, mounts."""
        if os.geteuid() != 0:
            raise UserError("aitax cluster up needs root: it creates a network bridge, iptables rules and mounts")
        for name in ("kubelet", "kube-proxy", "kube-router", "coredns", "pause"):
            tool(name)
        other = self._other_clusters()
        if other:
            raise UserError(f"another aitax cluster runs on this machine (pid {other[0].pid}: "
                            f"{' '.join(other[0].cmdline())[:120]}); one node per machine: stop it first "
                            "(`aitax cluster down` in its checkout)")
        super().up(fresh=fresh)

    def _other_clusters(self) -> list[psutil.Process]:
        """kubelets of other checkouts: the bridge, node address and iptables chains are machine-wide."""
        found = []
        for process in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(process.info["cmdline"] or [])
            if "kubelet" in cmdline and f"--hostname-override={NODE_NAME}" in cmdline and str(self.home) not in cmdline:
                found.append(process)
        return found

    def _start_components(self) -> None:
        self._setup_network()
        self._start_containerd()
        super()._start_components()

    def _extra_tokens(self) -> list[str]:
        return [f'{os.urandom(24).hex()},system:node:{NODE_NAME},kubelet,"system:nodes"',
                f'{os.urandom(24).hex()},system:kube-proxy,kube-proxy,"system:node-proxier"']

    def _apiserver_args(self) -> list[str]:
        pki = self.home / "pki"
        return [
            f"--bind-address={NODE_IP}", f"--advertise-address={NODE_IP}", "--endpoint-reconciler-type=lease",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            "--enable-priority-and-fairness=false",
            # Logs and exec reach kubelet at the node address: the node's name resolves nowhere.
            "--kubelet-preferred-address-types=InternalIP",
        ]

    def _controller_manager_args(self) -> list[str]:
        return ["--allocate-node-cidrs=true", f"--cluster-cidr={CLUSTER_CIDR}", "--node-cidr-mask-size=24",
                f"--cluster-signing-cert-file={self.home / 'pki' / 'ca.crt'}",
                f"--cluster-signing-key-file={self.home / 'pki' / 'ca.key'}"]

    def _write_credentials(self) -> None:
        super()._write_credentials()
        pki = self.home / "pki"
        self._sign(pki, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
                   "extendedKeyUsage=clientAuth")
        self._sign(pki, "kubelet", f"/O=system:nodes/CN=system:node:{NODE_NAME}",
                   f"subjectAltName=IP:{NODE_IP},DNS:{NODE_NAME}\nextendedKeyUsage=serverAuth")
        tokens = {line.split(",")[1]: line.split(",")[0] for line in (pki / "tokens.csv").read_text().splitlines()}
        for user, file in ((f"system:node:{NODE_NAME}", "kubelet.kubeconfig"),
                           ("system:kube-proxy", "kube-proxy.kubeconfig")):
            text = self.kubeconfig.read_text().replace(tokens["admin"], tokens[user])
            (self.home / file).write_text(text.replace("user: admin", f"user: {user}")
                                          .replace("- name: admin", f"- name: {user}"))
            (self.home / file).chmod(0o600)

    @staticmethod
    def _sign(pki: Path, name: str, subject: str, extensions: str) -> None:
        if (pki / f"{name}.crt").exists():
            return
        (pki / f"{name}.cnf").write_text(f"[ext]\n{extensions}\n")

        def run(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)

        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "3650", "-extfile", f"{name}.cnf", "-extensions", "ext")
        (pki / f"{name}.key").chmod(0o600)

    def _setup_network(self) -> None:
        for key, value in (("net/ipv4/ip_forward", "1"), ("net/bridge/bridge-nf-call-iptables", "1"),
                           ("fs/inotify/max_user_instances", "1024")):
            Path("/proc/sys", key).write_text(value)
        if not Path("/sys/class/net", BRIDGE).exists():
            _run("ip", "link", "add", BRIDGE, "type", "bridge")
        addresses = _run("ip", "-o", "-4", "addr", "show", "dev", BRIDGE)
        if NODE_IP not in addresses:
            _run("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        cni = self.home / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-aitax.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "aitax",
            "plugins": [
                {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(cni / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}, indent=2))

    def _start_containerd(self) -> None:
        root = self.home / "containerd"
        root.mkdir(parents=True, exist_ok=True)
        config = root / "config.toml"
        config.write_text(f"""\
version = 2
root = "{root / 'root'}"
state = "{root / 'state'}"
# A private instance: its own socket, no plugins writing outside this folder.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[debug]
  address = "{root / 'debug.sock'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE_REFERENCE}"
  # This VM refuses to lower oom_score_adj (kubelet asks -998 for sandboxes): keep each at least containerd's.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{self.home / 'cni' / 'net.d'}"
""")
        process = self._start("containerd", [shutil.which("containerd") or "containerd", f"--config={config}",
                                             "--log-level=warn"])
        wait_until(lambda: self.containerd_socket.exists() and self.ctr("version", check=False).returncode == 0,
                   60, "containerd", process)
        if images.image_id(images.PAUSE_REFERENCE) is None:
            images.build_pause(tool("pause"))
        images.load_into(self.ctr, self.home / "loaded-images", [images.PAUSE_REFERENCE], log=lambda _: None)

    def ctr(self, *args: str, check: bool = True, stdin: IO[bytes] | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run([shutil.which("ctr") or "ctr", "--address", str(self.containerd_socket),
                                 "--namespace", "k8s.io", *args], capture_output=True, stdin=stdin, timeout=600)
        result.stdout, result.stderr = result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")
        if check and result.returncode != 0:
            raise UserError(f"ctr {' '.join(args[:2])} failed: {result.stderr.strip()[-300:]}")
        return result

    def _start_nodes(self) -> None:
        self._start_kubelet()
        self._start_kube_proxy()
        self._start_coredns()
        self._start("provisioner", [sys.executable, "-m", "cluster.provisioner",
                                    f"--kubeconfig={self.kubeconfig}", f"--volumes={self.home / 'volumes'}",
                                    f"--storage-class={STORAGE_CLASS}", f"--marker={self.home}"])
        self._apply_storage_class()
        wait_until(self._node_ready, NODE_READY_TIMEOUT_S, f"node {NODE_NAME}", self._process("kubelet"))
        self._start_network_policy()  # it reads its Node object at start and exits if there is none yet

    def _start_kubelet(self) -> None:
        kubelet_dir = self.home / "kubelet"
        kubelet_dir.mkdir(parents=True, exist_ok=True)
        pki = self.home / "pki"
        resolv = self.home / "resolv.conf"
        resolv.write_text(f"nameserver {NODE_IP}\n")  # pods with dnsPolicy Default also get cluster DNS only
        config = self.home / "kubelet-config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # cgroup v1 is deprecated from 1.35 on and refused unless this is false (KEP-5573); no systemd here.
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": "/",
            "address": NODE_IP, "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.port_base + 648,
            "tlsCertFile": str(pki / "kubelet.crt"), "tlsPrivateKeyFile": str(pki / "kubelet.key"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [NODE_IP], "clusterDomain": "cluster.local", "resolvConf": str(resolv),
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "failSwapOn": False,
            # Images cannot be pulled back (no registry): never collect them.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            # The machine's disk is shared with other work: evict only when really short. A share of a large disk is
            # gigabytes (3% of 252 GB is 7.5 GB): at that threshold kubelet deleted the pause image in CI, which
            # containerd could not pull back (there is no registry), and no pod could start after it.
            "evictionHard": {"memory.available": "200Mi", "nodefs.available": "1Gi", "imagefs.available": "1Gi"},
            "serializeImagePulls": False, "maxPods": 110,
            "podLogsDir": str(self.home / "pod-logs"),  # not /var/log/pods: `down` leaves nothing behind
        }, indent=2))
        self._start("kubelet", [
            str(tool("kubelet")), f"--config={config}", f"--kubeconfig={self.home / 'kubelet.kubeconfig'}",
            f"--hostname-override={NODE_NAME}", f"--node-ip={NODE_IP}", f"--root-dir={kubelet_dir}", "--v=1",
        ])

    def _start_kube_proxy(self) -> None:
        config = self.home / "kube-proxy-config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.home / "kube-proxy.kubeconfig")},
            "mode": "iptables", "clusterCIDR": CLUSTER_CIDR, "hostnameOverride": NODE_NAME,
            "bindAddress": NODE_IP, "healthzBindAddress": f"127.0.0.1:{self.port_base + 656}",
            "metricsBindAddress": f"127.0.0.1:{self.port_base + 649}",
            "nodePortAddresses": [f"{NODE_IP}/32"],  # NodePorts on the node address only, not the machine's
            "conntrack": {"maxPerCore": 0},  # leave the machine's conntrack table size alone
        }, indent=2))
        self._start("kube-proxy", [str(tool("kube-proxy")), f"--config={config}"])

    def _start_network_policy(self) -> None:
        """kube-router's firewall alone: each pod's ingress and egress rules from the NetworkPolicies that select it,
        in iptables chains (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*) matching ipsets of pod addresses. Bridged
        pod-to-pod traffic passes the FORWARD chain because bridge-nf-call-iptables is on."""
        process = self._start("kube-router", [
            str(tool("kube-router")), f"--kubeconfig={self.kubeconfig}", f"--hostname-override={NODE_NAME}",
            "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--health-addr=127.0.0.1",  # not every interface
            f"--health-port={self.port_base + 646}",
            "--metrics-port=0", "--iptables-sync-period=1m", "--v=1",
        ])
        wait_until(lambda: port_is_open(self.port_base + 646), 60, "kube-router", process)

    def _start_coredns(self) -> None:
        corefile = self.home / "Corefile"
        corefile.write_text(f"""\
.:53 {{
    bind {NODE_IP}
    errors
    health {NODE_IP}:{self.port_base + 653}
    ready {NODE_IP}:{self.port_base + 654}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 30
    loop
    reload
    loadbalance
}}
""")
        # Nothing is forwarded: names outside the cluster do not resolve (no traffic leaves the node).
        process = self._start("coredns", [str(tool("coredns")), "-conf", str(corefile)])
        wait_until(lambda: port_is_open(self.port_base + 654, host=NODE_IP), 60, "CoreDNS", process)

    def _apply_storage_class(self) -> None:
        manifest = self.home / "storage-class.yaml"
        manifest.write_text(f"""\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {STORAGE_CLASS}
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: aitax.local/host-path
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
""")
        self.apply_when_accepted(manifest, 60)

    def _node_ready(self) -> bool:
        result = self.kubectl("get", "node", NODE_NAME, "-o",
                              "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False, timeout_s=10)
        return result.returncode == 0 and result.stdout.strip() == "True"

    def _api_ready(self) -> bool:
        if not port_is_open(self.apiserver_port, host=NODE_IP):
            return False
        return self.kubectl("get", "--raw", "/readyz", check=False, timeout_s=10).returncode == 0

    # --- down ---------------------------------------------------------------------------------------------------

    def down(self) -> None:
        """Every pod first (so kubelet tears down containers and pod networks), then every process, then a sweep
        of anything a crash left."""
        if self._process("kube-apiserver").is_running() and self._process("kubelet").is_running():
            self._process("kube-controller-manager").stop(timeout_s=20)  # no replacement pods from here on
            self.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=0", "--force",
                         "--wait=false", check=False)
            poll_until(lambda: not self._running_tasks(), POD_TEARDOWN_TIMEOUT_S, interval_s=1.0)
        for process in reversed(self.processes):
            process.stop(timeout_s=20)
        self._sweep()

    def _running_tasks(self) -> list[str]:
        if not self._process("containerd").is_running():
            return []
        result = self.ctr("tasks", "ls", "-q", check=False)
        return result.stdout.split() if result.returncode == 0 else []

    def _sweep(self) -> None:
        leftover = self._shims() + self._strays()
        for process in leftover:
            process.kill()
        psutil.wait_procs(leftover, timeout=10)
        for mount in reversed(self._mounts()):
            subprocess.run(["umount", "-l", mount], capture_output=True)
        for netns in self._netns():
            subprocess.run(["umount", str(netns)], capture_output=True)
            netns.unlink(missing_ok=True)
        for link in self._links():
            subprocess.run(["ip", "link", "delete", link], capture_output=True)
        for cleanup in (["kube-proxy", "--cleanup"], ["kube-router", "--cleanup-config"]):
            if os.path.exists(tool(cleanup[0])):
                subprocess.run([str(tool(cleanup[0])), *cleanup[1:]], capture_output=True, timeout=60)
        _remove_chains()
        for ipset in _ipsets():  # after the rules that match them: a set in use cannot be destroyed
            subprocess.run(["ipset", "destroy", ipset], capture_output=True)
        for cgroup in self._cgroups():
            for directory in sorted(cgroup.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if directory.is_dir():
                    directory.rmdir()
            cgroup.rmdir()

    def leftovers(self) -> dict[str, list[str]]:
        """What of this cluster is still on the machine (empty lists after a clean `down`)."""
        return {
            "processes": [f"{p.name} ({p.pid()})" for p in self.processes if p.is_running()]
            + [f"shim {s.pid}" for s in self._shims()] + [f"stray {s.pid}" for s in self._strays()],
            "mounts": self._mounts(),
            "network namespaces": [str(n) for n in self._netns()],
            "network devices": self._links(),
            "iptables chains": _chains(),
            "ipsets": _ipsets(),
            "cgroups": [str(c) for c in self._cgroups()],
        }

    def _strays(self) -> list[psutil.Process]:
        """Processes running from this cluster's folder that no PID file tracks (a crash, a hand-started one)."""
        tracked = {p.pid() for p in self.processes} | {s.pid for s in self._shims()}
        marker = str(self.home)
        found = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            if process.info["pid"] not in tracked and marker in " ".join(process.info["cmdline"] or []):
                found.append(process)
        return found

    def _shims(self) -> list[psutil.Process]:
        marker = str(self.containerd_socket)
        found = []
        for process in psutil.process_iter(["name", "cmdline"]):
            if "containerd-shim" in (process.info["name"] or "") and marker in " ".join(process.info["cmdline"] or []):
                found.append(process)
        return found

    def _mounts(self) -> list[str]:
        prefix = str(self.home) + "/"
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        return [m for m in mounts if m.startswith(prefix)]

    def _netns(self) -> list[Path]:
        # containerd's CRI names pod network namespaces cni-<uuid>.
        return sorted(NETNS_DIR.glob("cni-*")) if NETNS_DIR.exists() else []

    def _links(self) -> list[str]:
        links = json.loads(_run("ip", "-j", "link", "show") or "[]")
        return [link["ifname"] for link in links if link["ifname"] == BRIDGE or link.get("master") == BRIDGE]

    def _cgroups(self) -> list[Path]:
        return sorted(p for p in CGROUP_ROOT.glob("*/kubepods") if p.is_dir())


def _run(*argv: str) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True)
    if result.returncode != 0:
        raise UserError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout


def _chains() -> list[str]:
    """KUBE-*/CNI-* chains in the tables kube-proxy, kubelet and the CNI plugins write."""
    found = []
    for table in IPTABLES_TABLES:
        listing = subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True).stdout
        found += [f"{table}/{m}" for m in re.findall(r"^-N (\S+)", listing, re.MULTILINE)
                  if m.startswith(CHAIN_PREFIXES)]
    return found


def _ipsets() -> list[str]:
    listing = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout
    return [name for name in listing.split() if name.startswith(IPSET_PREFIXES)]


def _remove_chains() -> None:
    """Rules jumping to KUBE-*/CNI-* chains in built-in chains, then those chains (flushed first)."""
    for table in IPTABLES_TABLES:
        listing = subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True).stdout
        for rule in listing.splitlines():
            match = re.match(r"^-A (\S+) (.*-j (\S+).*)$", rule)
            if match and not match.group(1).startswith(CHAIN_PREFIXES) and match.group(3).startswith(CHAIN_PREFIXES):
                subprocess.run(["iptables", "-t", table, "-D", match.group(1), *shlex.split(match.group(2))],
                               capture_output=True)
        chains = [m for m in re.findall(r"^-N (\S+)", listing, re.MULTILINE) if m.startswith(CHAIN_PREFIXES)]
        for chain in chains:
            subprocess.run(["iptables", "-t", table, "-F", chain], capture_output=True)
        for chain in chains:
            subprocess.run(["iptables", "-t", table, "-X", chain], capture_output=True)
