"""A node's link shaped like a real network's: bandwidth (tbf), loss (a random drop in the node's mangle table) and
delay (netem, where the kernel has it), each way: on the machine's end of the node's cable (what the node receives)
and on the node's own end (what it sends), so a 1 Gbit/s link is 1 Gbit/s in and 1 Gbit/s out, as a switch port is.

Defaults are off. `aitax cluster up --link-rate ...` shapes every node; `aitax cluster link` and an experiment
phase's `links:` reshape them while the cluster runs.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from aitax.common.errors import UserError

LOSS_CHAIN = "AITAX-LINK-LOSS"
# tbf's bucket: at least one GSO super-packet (veth hands TCP 64 KiB segments), and 4 ms of the rate, so that the
# kernel's timer granularity does not hold a fast link under its rate.
MIN_BURST_BYTES = 2 * 65536
BURST_S = 0.004
QUEUE_LATENCY_MS = 50  # a packet waits at most this long in the bucket's queue before it is dropped, like a switch


@dataclass(frozen=True)
class LinkShape:
    """One node's link. None: that property is not shaped."""

    rate_mbit: float | None = None
    delay_ms: float | None = None
    loss_percent: float | None = None

    def __post_init__(self) -> None:
        for name, value in (("rate_mbit", self.rate_mbit), ("delay_ms", self.delay_ms)):
            if value is not None and value <= 0:
                raise UserError(f"link {name} {value:g}: give a positive number (or leave it out: not shaped)")
        if self.loss_percent is not None and not 0 <= self.loss_percent < 100:
            raise UserError(f"link loss_percent {self.loss_percent:g}: give a share in [0, 100)")

    def describe(self) -> str:
        parts = [f"{self.rate_mbit:g} Mbit/s" if self.rate_mbit else "",
                 f"{self.delay_ms:g} ms" if self.delay_ms else "",
                 f"{self.loss_percent:g}% loss" if self.loss_percent else ""]
        return ", ".join(p for p in parts if p) or "unshaped"


RATE_UNITS = {"kbit": 1e-3, "mbit": 1.0, "gbit": 1e3}


def parse_rate(text: str) -> float:
    """'1gbit', '500mbit', '800kbit' or a plain number of Mbit/s -> Mbit/s."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmg]bit)?(?:/s)?\s*", text.lower())
    if not match:
        raise UserError(f"link rate {text!r}: give a number and kbit, mbit or gbit (e.g. 1gbit, 250mbit)")
    return float(match.group(1)) * RATE_UNITS[match.group(2) or "mbit"]


def apply(shape: LinkShape, host_device: str, netns: str, node_device: str) -> None:
    """Replace whatever shaped this link with `shape` (an unshaped one clears it)."""
    for device, namespace in ((host_device, None), (node_device, netns)):
        _qdisc(namespace, device, shape)
    _loss(netns, node_device, shape.loss_percent)


def current(host_device: str) -> str:
    """What `tc` says shapes the machine's end of the link (for `aitax cluster status`)."""
    shown = _run(None, "tc", "qdisc", "show", "dev", host_device, check=False).splitlines()
    return "; ".join(line.strip() for line in shown if " tbf " in line or " netem " in line)


def _qdisc(netns: str | None, device: str, shape: LinkShape) -> None:
    _run(netns, "tc", "qdisc", "del", "dev", device, "root", check=False)  # none set: nothing to delete
    parent = ["root"]
    if shape.rate_mbit:
        rate_bit = shape.rate_mbit * 1e6
        burst = max(MIN_BURST_BYTES, int(rate_bit / 8 * BURST_S))
        _run(netns, "tc", "qdisc", "add", "dev", device, "root", "handle", "1:", "tbf", "rate", f"{rate_bit:.0f}bit",
             "burst", str(burst), "latency", f"{QUEUE_LATENCY_MS}ms")
        parent = ["parent", "1:1"]
    if shape.delay_ms:
        added = _run(netns, "tc", "qdisc", "add", "dev", device, *parent, "handle", "10:", "netem", "delay",
                     f"{shape.delay_ms}ms", check=False)
        if "unknown" in added.lower():
            raise UserError(f"link delay {shape.delay_ms:g} ms: this kernel has no netem qdisc "
                            "(CONFIG_NET_SCH_NETEM), so delay cannot be shaped here; rate and loss can")


def _loss(netns: str, device: str, loss_percent: float | None) -> None:
    """A random drop of each packet crossing the node's end of the link, each way (mangle: no other component of
    the node writes there, so kube-proxy's and kube-router's rule syncs never move it)."""
    for hook, direction in (("PREROUTING", "-i"), ("POSTROUTING", "-o")):
        while _run(netns, "iptables", "-t", "mangle", "-D", hook, direction, device, "-j", LOSS_CHAIN,
                   check=False) == "":
            pass
    _run(netns, "iptables", "-t", "mangle", "-F", LOSS_CHAIN, check=False)
    _run(netns, "iptables", "-t", "mangle", "-X", LOSS_CHAIN, check=False)
    if not loss_percent:
        return
    _run(netns, "iptables", "-t", "mangle", "-N", LOSS_CHAIN)
    _run(netns, "iptables", "-t", "mangle", "-A", LOSS_CHAIN, "-m", "statistic", "--mode", "random",
         "--probability", f"{loss_percent / 100:.6f}", "-j", "DROP")
    for hook, direction in (("PREROUTING", "-i"), ("POSTROUTING", "-o")):
        _run(netns, "iptables", "-t", "mangle", "-A", hook, direction, device, "-j", LOSS_CHAIN)


def _run(netns: str | None, *argv: str, check: bool = True) -> str:
    """The command's stdout; with check=False a failure returns its stderr (never empty) instead of raising."""
    full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
    result = subprocess.run(full, capture_output=True, text=True)
    if result.returncode != 0:
        if check:
            raise UserError(f"{' '.join(argv)} failed: {result.stderr.strip()[-300:]}")
        return result.stderr or f"exit {result.returncode}"
    return result.stdout
