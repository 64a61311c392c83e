"""A real Kubernetes of one or more nodes on this machine: the control plane of `LocalControlPlane`, and per node
containerd + runc (pods are Linux containers with cgroup limits), kubelet, kube-proxy (iptables Services) and
kube-router as the NetworkPolicy firewall (iptables + ipsets; it neither routes nor proxies), plus CoreDNS and a
host-path volume provisioner, all as processes under $AITAX_HOME/cluster.

Each node (`node.Node`) is a network namespace with its own link to the machine's bridge, its own containerd state
and kubelet root; the nodes' images are `node_images.NodeImages`. The control plane, CoreDNS and the provisioner run
on the machine at 10.243.0.1, like a cloud's managed control plane. Each node's pods get the /24 the
controller-manager allocated to it (10.244.<n>.0/24); every node and the machine route each node's /24 to that node
over the bridge, so pod traffic between nodes crosses both nodes' links, where `cluster.links` can shape it.
Services are 10.96.0.0/16 (the machine reaches them through node 0); cluster DNS is CoreDNS on 10.243.0.1.

`down` removes every pod first (kubelets tear down their containers and networks), stops every process, then sweeps
what a crash could leave: containerd shims, mounts, network namespaces (a node's iptables and ipsets go with its
namespace), the bridge and links, and the nodes' cgroups. `leftovers()` lists whatever is still there
(both in `cluster.leftovers`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO

import psutil

from aitax.cluster import images, leftovers, links
from aitax.cluster.control_plane import SERVICE_CIDR, LocalControlPlane, tool
from aitax.cluster.node import (
    BRIDGE,
    CONTROL_IP,
    NODE_PREFIX,
    Node,
    reshape,
    run_checked,
    setup_machine_network,
    setup_node,
)
from aitax.cluster.node_images import NodeImages
from aitax.common.daemons import ManagedProcess, poll_until, port_is_open, wait_until
from aitax.common.errors import UserError
from aitax.common.paths import aitax_home

CLUSTER_CIDR = "10.244.0.0/16"  # the controller-manager gives each node a /24 of it
POD_BRIDGE = "cni0"
MAX_NODES = 8  # node identities are made with the cluster's credentials, once
STORAGE_CLASS = "aitax-local"
NODE_READY_TIMEOUT_S = 180
# kubelet's device-plugin socket, whatever its --root-dir: every node's kubelet shares it (see _start_nodes)
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
# What the node lifecycle controller and kubelet put on a node that cannot take pods (not a user's own taints).
TROUBLE_TAINTS = frozenset(f"node.kubernetes.io/{trouble}" for trouble in (
    "not-ready", "unreachable", "memory-pressure", "disk-pressure", "pid-pressure", "network-unavailable"))
POD_TEARDOWN_TIMEOUT_S = 90


@dataclass(frozen=True)
class RealCluster(LocalControlPlane):
    nodes: int = 0  # 0: as many as the running (or last) cluster has, 1 for a new one
    extra_serving_ips: tuple[str, ...] = (CONTROL_IP,)
    link: links.LinkShape = field(default_factory=links.LinkShape)  # every node's link at `up`

    @property
    def home(self) -> Path:
        return aitax_home() / "cluster"

    @property
    def node_list(self) -> list[Node]:
        count = self.nodes or self._recorded_nodes() or 1
        return [Node(index) for index in range(count)]

    def _recorded_nodes(self) -> int:
        try:
            return int(json.loads((self.home / "nodes.json").read_text())["nodes"])
        except (OSError, ValueError, KeyError):
            return 0

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
        return f"https://{CONTROL_IP}:{self.apiserver_port}"

    def node_home(self, node: Node) -> Path:
        return self.home / "nodes" / node.name

    def containerd_socket(self, node: Node) -> Path:
        return self.node_home(node) / "containerd" / "containerd.sock"

    @property
    def processes(self) -> list[ManagedProcess]:
        nodes = self.node_list
        names = [f"containerd-{n.index}" for n in nodes] + ["etcd", "kube-apiserver", "kube-controller-manager",
                                                            "kube-scheduler"]
        names += [f"{agent}-{n.index}" for agent in ("kubelet", "kube-proxy", "kube-router") for n in nodes]
        return [self._process(name) for name in (*names, "coredns", "provisioner")]

    def node_processes(self, node: Node) -> list[ManagedProcess]:
        """In start order."""
        return [self._process(f"{agent}-{node.index}")
                for agent in ("containerd", "kubelet", "kube-proxy", "kube-router")]

    def is_running(self) -> bool:
        return all(p.is_running() for p in self.processes) and port_is_open(self.apiserver_port, host=CONTROL_IP)

    # --- up -----------------------------------------------------------------------------------------------------

    def up(self, fresh: bool = False) -> None:
        """Start everything (keeping etcd's state, the images and volumes unless `fresh`) and wait for every node
        Ready, CoreDNS and the default StorageClass. Needs root: it creates namespaces, links, iptables rules,
        mounts."""
        if os.geteuid() != 0:
            raise UserError("aitax cluster up needs root: it creates network namespaces, links, iptables rules and "
                            "mounts")
        if not 1 <= len(self.node_list) <= MAX_NODES:
            raise UserError(f"--nodes {len(self.node_list)}: give 1 to {MAX_NODES}")
        for name in ("kubelet", "kube-proxy", "kube-router", "coredns", "pause"):
            tool(name)
        other = self._other_clusters()
        if other:
            raise UserError(f"another aitax cluster runs on this machine (pid {other[0].pid}: "
                            f"{' '.join(other[0].cmdline())[:120]}); one cluster per machine: stop it first "
                            "(`aitax cluster down` in its checkout)")
        running = self._recorded_nodes()
        if self.nodes and running and running != self.nodes and self._process("kube-apiserver").is_running():
            raise UserError(f"the cluster runs {running} node(s), not {self.nodes}: `aitax cluster down` first")
        super().up(fresh=fresh)

    def _other_clusters(self) -> list[psutil.Process]:
        """kubelets of other checkouts: the bridge, addresses and namespace names are machine-wide."""
        found = []
        for process in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(process.info["cmdline"] or [])
            if "kubelet" in cmdline and f"--hostname-override={NODE_PREFIX}" in cmdline \
                    and str(self.home) not in cmdline:
                found.append(process)
        return found

    def _start_components(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "nodes.json").write_text(json.dumps({"nodes": len(self.node_list)}))
        setup_machine_network()
        for node in self.node_list:
            setup_node(node, self.link)
            self.start_containerd(node)
        super()._start_components()

    def _extra_tokens(self) -> list[str]:
        return [f'{os.urandom(24).hex()},system:node:{Node(i).name},kubelet-{i},"system:nodes"'
                for i in range(MAX_NODES)] + [f'{os.urandom(24).hex()},system:kube-proxy,kube-proxy,'
                                             '"system:node-proxier"']

    def _apiserver_args(self) -> list[str]:
        pki = self.home / "pki"
        return [
            f"--bind-address={CONTROL_IP}", f"--advertise-address={CONTROL_IP}", "--endpoint-reconciler-type=lease",
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
                f"--cluster-signing-key-file={self.home / 'pki' / 'ca.key'}",
                # A node whose kubelet stops is NotReady after 20 s, and its pods are evicted 30 s later (the
                # defaults, 40 s and 300 s, are a data centre's patience; a broker's outage here is the test).
                "--node-monitor-grace-period=20s"]

    def _write_credentials(self) -> None:
        super()._write_credentials()
        pki = self.home / "pki"
        self._sign(pki, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
                   "extendedKeyUsage=clientAuth")
        tokens = {line.split(",")[1]: line.split(",")[0] for line in (pki / "tokens.csv").read_text().splitlines()}
        users = [(f"system:node:{n.name}", f"kubelet-{n.name}.kubeconfig") for n in self.node_list]
        for user, file in (*users, ("system:kube-proxy", "kube-proxy.kubeconfig")):
            if user not in tokens:
                raise UserError(f"{pki / 'tokens.csv'} has no identity for {user}: it was made by an older "
                                f"`aitax cluster`; remove {pki} and start again")
            text = self.kubeconfig.read_text().replace(tokens["admin"], tokens[user])
            (self.home / file).write_text(text.replace("user: admin", f"user: {user}")
                                          .replace("- name: admin", f"- name: {user}"))
            (self.home / file).chmod(0o600)
        for node in self.node_list:
            self._sign(pki, f"kubelet-{node.name}", f"/O=system:nodes/CN=system:node:{node.name}",
                       f"subjectAltName=IP:{node.ip},DNS:{node.name}\nextendedKeyUsage=serverAuth")

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

    # --- the network --------------------------------------------------------------------------------------------

    def _route_pods(self) -> None:
        """Each node's pod /24 to that node, on the machine and on every other node; each node's CNI config from
        the /24 the controller-manager gave it (containerd reads it; the node is Ready from then)."""
        wait_until(lambda: self._pod_cidrs() is not None, NODE_READY_TIMEOUT_S, "every node's pod CIDR",
                   self._process("kube-controller-manager"))
        cidrs = self._pod_cidrs() or {}
        # The machine reaches Services through node 0's kube-proxy rules, as a client outside a cluster reaches it
        # through a load balancer in front of a node.
        run_checked("ip", "route", "replace", SERVICE_CIDR, "via", self.node_list[0].ip, "dev", BRIDGE)
        for node in self.node_list:
            cidr = cidrs[node.name]
            run_checked("ip", "route", "replace", cidr, "via", node.ip, "dev", BRIDGE)
            for other in self.node_list:
                if other != node:
                    run_checked("ip", "netns", "exec", other.netns, "ip", "route", "replace", cidr, "via", node.ip)
            network, _ = cidr.split("/")
            gateway = network.rsplit(".", 1)[0] + ".1"
            cni = self.node_home(node) / "cni"
            (cni / "net.d").mkdir(parents=True, exist_ok=True)
            (cni / "net.d" / "10-aitax.conflist").write_text(json.dumps({
                "cniVersion": "0.4.0", "name": "aitax",
                "plugins": [
                    {"type": "bridge", "bridge": POD_BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": cidr, "gateway": gateway}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(cni / "ipam")}},
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                ]}, indent=2))

    def _pod_cidrs(self) -> dict[str, str] | None:
        result = self.kubectl("get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.podCIDR}"
                              "{'\\n'}{end}", check=False, timeout_s=10)
        cidrs = dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)
        wanted = {node.name: cidrs.get(node.name, "") for node in self.node_list}
        return wanted if result.returncode == 0 and all(wanted.values()) else None

    def reshape(self, shape: links.LinkShape, nodes: list[Node] | None = None) -> None:
        """Shape these nodes' links (all by default) while the cluster runs."""
        for node in nodes or self.node_list:
            reshape(node, shape)

    # --- a node's agents ----------------------------------------------------------------------------------------

    def start_containerd(self, node: Node) -> None:
        root = self.node_home(node) / "containerd"
        root.mkdir(parents=True, exist_ok=True)
        socket_path = self.containerd_socket(node)
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
  address = "{socket_path}"
[ttrpc]
  address = "{socket_path}.ttrpc"
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
    conf_dir = "{self.node_home(node) / 'cni' / 'net.d'}"
""")
        process = self._start(f"containerd-{node.index}", node.inside([
            shutil.which("containerd") or "containerd", f"--config={config}", "--log-level=warn"]))
        wait_until(lambda: socket_path.exists() and self.ctr(node, "version", check=False).returncode == 0,
                   60, f"containerd of {node.name}", process)
        if images.image_id(images.PAUSE_REFERENCE) is None:
            images.build_pause(tool("pause"))
        NodeImages(self).import_into(node, [images.PAUSE_REFERENCE], log=lambda _: None)

    def ctr(self, node: Node, *args: str, check: bool = True,
            stdin: IO[bytes] | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run([shutil.which("ctr") or "ctr", "--address", str(self.containerd_socket(node)),
                                 "--namespace", "k8s.io", *args], capture_output=True, stdin=stdin, timeout=600)
        result.stdout, result.stderr = result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")
        if check and result.returncode != 0:
            raise UserError(f"ctr {' '.join(args[:2])} on {node.name} failed: {result.stderr.strip()[-300:]}")
        return result

    def load_images(self, references: list[str], log=print) -> None:
        """Each image into every node's containerd (`NodeImages.load`)."""
        NodeImages(self).load(self.node_list, references, log)

    def stop_containerd(self, node: Node) -> None:
        self._process(f"containerd-{node.index}").stop(timeout_s=20)

    def wait_for_nodes(self, nodes: list[Node], what: str) -> None:
        self._wait_for_nodes(nodes, what, self._process("kubelet-0"))

    def _start_nodes(self) -> None:
        for node in self.node_list:
            # One kubelet at a time until it listens on the shared device-plugin socket: each empties that folder
            # and then binds, so two starting together can find the other's new socket in place and exit ("bind:
            # address already in use"); that node then never registered.
            started = time.time()
            self._start_kubelet(node)
            wait_until(partial(_made_since, DEVICE_PLUGIN_SOCKET, started), NODE_READY_TIMEOUT_S,
                       f"kubelet of {node.name}", self._process(f"kubelet-{node.index}"))
            self._start_kube_proxy(node)
        self._start_coredns()
        self._start("provisioner", [sys.executable, "-m", "aitax.cluster.provisioner",
                                    f"--kubeconfig={self.kubeconfig}", f"--volumes={self.home / 'volumes'}",
                                    f"--storage-class={STORAGE_CLASS}", f"--marker={self.home}"])
        self._apply_storage_class()
        self._forget_other_nodes()
        self._route_pods()
        self._wait_for_nodes(self.node_list, f"{len(self.node_list)} Ready node(s)", self._process("kubelet-0"))
        for node in self.node_list:
            self._start_network_policy(node)  # it reads its Node object at start and exits if there is none yet

    def _forget_other_nodes(self) -> None:
        """Node objects of an earlier cluster with more nodes (etcd keeps them): their pods would wait for them."""
        names = self.kubectl("get", "nodes", "-o", "name", check=False).stdout.split()
        stale = [name for name in names if name.removeprefix("node/") not in {n.name for n in self.node_list}]
        if stale:
            self.kubectl("delete", *stale, "--wait=false")

    def _start_kubelet(self, node: Node) -> None:
        kubelet_dir = self.node_home(node) / "kubelet"
        kubelet_dir.mkdir(parents=True, exist_ok=True)
        pki = self.home / "pki"
        resolv = self.home / "resolv.conf"
        resolv.write_text(f"nameserver {CONTROL_IP}\n")  # pods with dnsPolicy Default also get cluster DNS only
        config = self.node_home(node) / "kubelet-config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # cgroup v1 is deprecated from 1.35 on and refused unless this is false (KEP-5573); no systemd here.
            # Each node's pods under its own cgroup, as each machine's would be.
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{node.name}",
            "address": node.ip, "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.port_base + 648,
            "tlsCertFile": str(pki / f"kubelet-{node.name}.crt"),
            "tlsPrivateKeyFile": str(pki / f"kubelet-{node.name}.key"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [CONTROL_IP], "clusterDomain": "cluster.local", "resolvConf": str(resolv),
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket(node)}",
            "failSwapOn": False,
            # Images cannot be pulled back (no registry): never collect them.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            # No node-pressure eviction ("0%" turns a signal off), as kind does. Every node's kubelet measures the
            # one shared machine, so one pressure signal taints every node at once, keeps the taint 5 min after it
            # clears and relieves no node. Disk pressure once made kubelet delete the pause image, which cannot be
            # pulled back (there is no registry). What really runs out still stops: the OOM killer, a full disk.
            "evictionHard": {signal: "0%" for signal in ("memory.available", "nodefs.available", "nodefs.inodesFree",
                                                         "imagefs.available", "imagefs.inodesFree")},
            "serializeImagePulls": False, "maxPods": 110,
            "podLogsDir": str(self.node_home(node) / "pod-logs"),  # not /var/log/pods: `down` leaves nothing behind
        }, indent=2))
        self._start(f"kubelet-{node.index}", node.inside([
            str(tool("kubelet")), f"--config={config}", f"--kubeconfig={self.home / f'kubelet-{node.name}.kubeconfig'}",
            f"--hostname-override={node.name}", f"--node-ip={node.ip}", f"--root-dir={kubelet_dir}", "--v=1",
        ]))

    def _start_kube_proxy(self, node: Node) -> None:
        config = self.node_home(node) / "kube-proxy-config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.home / "kube-proxy.kubeconfig")},
            "mode": "iptables", "clusterCIDR": CLUSTER_CIDR, "hostnameOverride": node.name,
            "bindAddress": node.ip, "healthzBindAddress": f"127.0.0.1:{self.port_base + 656}",
            "metricsBindAddress": f"127.0.0.1:{self.port_base + 649}",
            "nodePortAddresses": [f"{node.ip}/32"],  # NodePorts on the node's address only
            "conntrack": {"maxPerCore": 0},  # leave the machine's conntrack table size alone
        }, indent=2))
        self._start(f"kube-proxy-{node.index}", node.inside([str(tool("kube-proxy")), f"--config={config}"]))

    def _start_network_policy(self, node: Node) -> None:
        """kube-router's firewall alone: each pod's ingress and egress rules from the NetworkPolicies that select it,
        in iptables chains (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*) matching ipsets of pod addresses, in its
        node's namespace. Bridged pod-to-pod traffic passes the FORWARD chain because bridge-nf-call-iptables is
        on there."""
        health_port = self.port_base + 646
        process = self._start(f"kube-router-{node.index}", node.inside([
            str(tool("kube-router")), f"--kubeconfig={self.kubeconfig}", f"--hostname-override={node.name}",
            "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}", f"--health-addr={node.ip}", f"--health-port={health_port}",
            "--metrics-port=0", "--iptables-sync-period=1m", "--v=1",
        ]))
        wait_until(lambda: port_is_open(health_port, host=node.ip), 60, f"kube-router of {node.name}", process)

    def _start_coredns(self) -> None:
        corefile = self.home / "Corefile"
        corefile.write_text(f"""\
.:53 {{
    bind {CONTROL_IP}
    errors
    health {CONTROL_IP}:{self.port_base + 653}
    ready {CONTROL_IP}:{self.port_base + 654}
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
        # Nothing is forwarded: names outside the cluster do not resolve (no traffic leaves the cluster).
        process = self._start("coredns", [str(tool("coredns")), "-conf", str(corefile)])
        wait_until(lambda: port_is_open(self.port_base + 654, host=CONTROL_IP), 60, "CoreDNS", process)

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

    def node_troubles(self) -> dict[str, str]:
        """Each node's trouble, "" for a node that can take pods: Ready, with no pressure and none of the taints
        the system puts on a node in trouble (not ready, unreachable, pressure, no network)."""
        result = self.kubectl("get", "nodes", "-o", "json", check=False, timeout_s=10)
        if result.returncode != 0:
            return {}
        troubles = {}
        for item in json.loads(result.stdout)["items"]:
            conditions = {c["type"]: c for c in item["status"].get("conditions", [])}
            ready = conditions.get("Ready", {}).get("status", "Unknown")
            trouble = [] if ready == "True" else [f"Ready={ready}: {conditions.get('Ready', {}).get('message', '')}"]
            trouble += [f"{kind}: {c.get('message', '')}" for kind, c in conditions.items()
                        if kind.endswith("Pressure") and c["status"] == "True"]
            trouble += [f"taint {t['key']}:{t['effect']}" for t in item["spec"].get("taints", [])
                        if t["key"] in TROUBLE_TAINTS]
            troubles[item["metadata"]["name"]] = "; ".join(trouble)
        return troubles

    def ready_nodes(self) -> set[str]:
        return {name for name, trouble in self.node_troubles().items() if not trouble}

    def _wait_for_nodes(self, nodes: list[Node], what: str, process: ManagedProcess) -> None:
        """Until every one of `nodes` can take pods; a timeout names each node's trouble."""
        try:
            wait_until(lambda: {node.name for node in nodes} <= self.ready_nodes(), NODE_READY_TIMEOUT_S, what,
                       process)
        except UserError as error:
            troubles = self.node_troubles()
            states = "; ".join(f"{n.name}: {troubles.get(n.name, 'no Node object') or 'ready'}" for n in nodes)
            raise UserError(f"{error} ({states})") from None

    def _api_ready(self) -> bool:
        if not port_is_open(self.apiserver_port, host=CONTROL_IP):
            return False
        return self.kubectl("get", "--raw", "/readyz", check=False, timeout_s=10).returncode == 0

    # --- a node's failure ---------------------------------------------------------------------------------------

    def fail_node(self, node: Node) -> None:
        """The node as a machine that lost power: its link cut, its agents and every container on it killed (no
        graceful stop, no pod deleted). Its namespace, state and volumes stay, as a powered-off machine's disk."""
        node.set_link(up=False)
        for process in reversed(self.node_processes(node)):
            pid = process.pid()
            if pid:
                psutil.Process(pid).kill()
        shims = leftovers.shims(str(self.containerd_socket(node)))
        for shim in shims:  # each shim's children (the containers) die with it: they are in its process group
            for child in shim.children(recursive=True):
                child.kill()
            shim.kill()
        psutil.wait_procs(shims, timeout=10)
        for process in self.node_processes(node):
            process.stop(timeout_s=5)  # reaps, and clears the PID file

    def restore_node(self, node: Node) -> None:
        """The node powered on again: its link up, containerd and kubelet started (kubelet restarts the pods the
        API server still assigns to it), kube-proxy and kube-router after them."""
        node.set_link(up=True)
        self.start_containerd(node)
        self._start_kubelet(node)
        self._start_kube_proxy(node)
        self._wait_for_nodes([node], f"{node.name} Ready again", self._process(f"kubelet-{node.index}"))
        self._start_network_policy(node)

    # --- down ---------------------------------------------------------------------------------------------------

    def down(self) -> None:
        """Every pod first (so kubelets tear down containers and pod networks), then every process, then a sweep
        of anything a crash left."""
        kubelets = [self._process(f"kubelet-{node.index}") for node in self.node_list]
        if self._process("kube-apiserver").is_running() and all(k.is_running() for k in kubelets):
            self._process("kube-controller-manager").stop(timeout_s=20)  # no replacement pods from here on
            self.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=0", "--force",
                         "--wait=false", check=False)
            poll_until(lambda: not any(self._running_tasks(node) for node in self.node_list),
                       POD_TEARDOWN_TIMEOUT_S, interval_s=1.0)
        for process in reversed(self.processes):
            process.stop(timeout_s=20)
        leftovers.sweep(self.home, self._tracked_pids())

    def _running_tasks(self, node: Node) -> list[str]:
        if not self._process(f"containerd-{node.index}").is_running():
            return []
        result = self.ctr(node, "tasks", "ls", "-q", check=False)
        return result.stdout.split() if result.returncode == 0 else []

    def leftovers(self) -> dict[str, list[str]]:
        """What of this cluster is still on the machine (empty lists after a clean `down`)."""
        running = [f"{p.name} ({p.pid()})" for p in self.processes if p.is_running()]
        return leftovers.found(self.home, running, self._tracked_pids())

    def _tracked_pids(self) -> set[int]:
        return {pid for pid in (p.pid() for p in self.processes) if pid}


def _made_since(path: Path, moment: float) -> bool:
    """Whether `path` exists and was made (or replaced) at `moment` or later (a second's slack for the clock)."""
    try:
        return path.stat().st_mtime >= moment - 1
    except FileNotFoundError:
        return False
