"""One node of `aitax cluster`, as kind and k3d make them from containers: a network namespace `aitax-node-<i>`
with its own link (a veth pair, `eth0` inside) to the machine's bridge `aitax0`, its own address 10.243.0.<11+i>,
its own iptables, ipsets and pod bridge, and its pods' cgroups under `/aitax-node-<i>`. The machine is 10.243.0.1
on the bridge. This module makes a node's namespace, link and cgroups, and finds whatever of them is left on the
machine."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aitax.cluster import links
from aitax.common.errors import UserError

BRIDGE = "aitax0"  # the machine's switch: every node's link ends on it
CONTROL_IP = "10.243.0.1"  # the machine's address on it: API server, CoreDNS
NODE_PREFIX = "aitax-node-"
NODE_DEVICE = "eth0"  # the node's end of its link
NETNS_DIR = Path("/var/run/netns")
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Node:
    """One node: its names and addresses follow from its index."""

    index: int

    @property
    def name(self) -> str:
        return f"{NODE_PREFIX}{self.index}"

    @property
    def ip(self) -> str:
        return f"10.243.0.{11 + self.index}"

    @property
    def netns(self) -> str:
        return self.name

    @property
    def host_device(self) -> str:
        return f"aitaxn{self.index}"  # the machine's end of the node's link

    def inside(self, argv: list[str]) -> list[str]:
        """argv run in the node's network namespace (only: it shares the machine's mounts, so kubelet's volume
        mounts are containerd's too)."""
        return ["nsenter", f"--net={NETNS_DIR / self.netns}", "--", *argv]

    def set_link(self, up: bool) -> None:
        """The node's link up or down (down: the node is cut off, as by a pulled cable)."""
        run_checked("ip", "link", "set", self.host_device, "up" if up else "down")


def setup_machine_network() -> None:
    for key, value in (("net/ipv4/ip_forward", "1"), ("fs/inotify/max_user_instances", "1024")):
        Path("/proc/sys", key).write_text(value)
    if not Path("/sys/class/net", BRIDGE).exists():
        run_checked("ip", "link", "add", BRIDGE, "type", "bridge")
    if CONTROL_IP not in run_checked("ip", "-o", "-4", "addr", "show", "dev", BRIDGE):
        run_checked("ip", "addr", "add", f"{CONTROL_IP}/24", "dev", BRIDGE)
    run_checked("ip", "link", "set", BRIDGE, "up")


def setup_node(node: Node, link: links.LinkShape) -> None:
    """The node's namespace and its link to the machine's bridge, shaped as `link` says, and its cgroups."""
    if not (NETNS_DIR / node.netns).exists():
        run_checked("ip", "netns", "add", node.netns)
    if not Path("/sys/class/net", node.host_device).exists():
        run_checked("ip", "link", "add", node.host_device, "type", "veth", "peer", "name", NODE_DEVICE,
                    "netns", node.netns)
    run_checked("ip", "link", "set", node.host_device, "master", BRIDGE, "up")
    inside = ["ip", "netns", "exec", node.netns]
    if node.ip not in run_checked(*inside, "ip", "-o", "-4", "addr", "show", "dev", NODE_DEVICE):
        run_checked(*inside, "ip", "addr", "add", f"{node.ip}/24", "dev", NODE_DEVICE)
    run_checked(*inside, "ip", "link", "set", "lo", "up")
    run_checked(*inside, "ip", "link", "set", NODE_DEVICE, "up")
    run_checked(*inside, "ip", "route", "replace", "default", "via", CONTROL_IP)
    # Per namespace: routing for its pods, and bridged pod traffic through iptables (NetworkPolicies).
    for key in ("net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"):
        run_checked(*inside, "sysctl", "-qw", key)
    reshape(node, link)
    for hierarchy in _cgroup_hierarchies():
        directory = hierarchy / node.name
        directory.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":  # a new cpuset has no CPUs or memory nodes until given its parent's
            for key in ("cpuset.cpus", "cpuset.mems"):
                (directory / key).write_text((hierarchy / key).read_text())


def reshape(node: Node, link: links.LinkShape) -> None:
    links.apply(link, node.host_device, node.netns, NODE_DEVICE)


def left_namespaces() -> list[Path]:
    # containerd's CRI names pod network namespaces cni-<uuid>; the nodes' are ours.
    if not NETNS_DIR.exists():
        return []
    return sorted([*NETNS_DIR.glob("cni-*"), *NETNS_DIR.glob(f"{NODE_PREFIX}*")])


def left_links() -> list[str]:
    found = json.loads(run_checked("ip", "-j", "link", "show") or "[]")
    return [link["ifname"] for link in found if link["ifname"] == BRIDGE or link.get("master") == BRIDGE
            or link["ifname"].startswith("aitaxn")]


def left_cgroups() -> list[Path]:
    return sorted(p for p in CGROUP_ROOT.glob(f"*/{NODE_PREFIX}*") if p.is_dir())


def _cgroup_hierarchies() -> list[Path]:
    return sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir() and (p / "cgroup.procs").exists()
                  and p.name != "unified")


def run_checked(*argv: str) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True)
    if result.returncode != 0:
        raise UserError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout
