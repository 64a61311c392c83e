"""Shaped links (cluster.links): the shape a user gives, and the tc / iptables commands it becomes on both ends of a
node's link (the commands faked at their edge; the real cluster's benchmark measures a shaped link's rate)."""

from __future__ import annotations

import pytest

from aitax.cluster import links
from aitax.cluster.links import LinkShape, parse_rate
from aitax.cluster.node import Node
from aitax.common.errors import UserError


@pytest.mark.parametrize(("text", "mbit"), [("1gbit", 1000.0), ("250mbit", 250.0), ("800kbit", 0.8), ("40", 40.0),
                                            ("2.5Gbit/s", 2500.0)])
def test_rates_read_as_tc_writes_them(text: str, mbit: float) -> None:
    assert parse_rate(text) == pytest.approx(mbit)


@pytest.mark.parametrize("text", ["fast", "1 gbps", "-5mbit", ""])
def test_a_rate_that_is_not_one_is_refused_by_name(text: str) -> None:
    with pytest.raises(UserError, match=r"^link rate .*: give a number and kbit, mbit or gbit"):
        parse_rate(text)


@pytest.mark.parametrize(("shape", "message"), [
    (dict(rate_mbit=0), "link rate_mbit 0: give a positive number"),
    (dict(delay_ms=-1), "link delay_ms -1: give a positive number"),
    (dict(loss_percent=100), r"link loss_percent 100: give a share in \[0, 100\)"),
])
def test_a_shape_out_of_range_is_refused_by_field(shape: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        LinkShape(**shape)


def test_a_shape_is_applied_on_both_ends_of_the_link(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str | None, tuple[str, ...]]] = []

    def run(netns: str | None, *argv: str, check: bool = True) -> str:
        ran.append((netns, argv))
        deleting = "-D" in argv or argv[:3] == ("tc", "qdisc", "del")
        return "nothing to delete" if deleting and not check else ""

    monkeypatch.setattr(links, "_run", run)
    node = Node(1)
    links.apply(LinkShape(rate_mbit=1000, loss_percent=0.5), node.host_device, node.netns, "eth0")
    buckets = [(netns, argv) for netns, argv in ran if "tbf" in argv]
    # What the node receives (the machine's end) and what it sends (its own end), each at the rate.
    assert [(netns, argv[4]) for netns, argv in buckets] == [(None, "aitaxn1"), ("aitax-node-1", "eth0")]
    assert all(argv[argv.index("rate") + 1] == "1000000000bit" for _, argv in buckets)
    assert all(int(argv[argv.index("burst") + 1]) == 500_000 for _, argv in buckets)  # 4 ms of 1 Gbit/s
    drops = [argv for netns, argv in ran if "statistic" in argv]
    assert len(drops) == 1 and drops[0][drops[0].index("--probability") + 1] == "0.005000"
    hooks = [argv for netns, argv in ran if argv[-2:] == ("-j", links.LOSS_CHAIN) and "-A" in argv]
    assert {(argv[4], argv[5], argv[6]) for argv in hooks} == {("PREROUTING", "-i", "eth0"),
                                                                ("POSTROUTING", "-o", "eth0")}
    assert not any("netem" in argv for _, argv in ran)  # no delay asked: no netem, which this kernel lacks


def test_unshaping_removes_the_bucket_and_the_drops_and_adds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(links, "_run", lambda netns, *argv, check=True: ran.append(argv) or "gone")
    links.apply(LinkShape(), "aitaxn0", "aitax-node-0", "eth0")
    assert not any(argv[:3] == ("tc", "qdisc", "add") or "-A" in argv or "-N" in argv for argv in ran)
    assert sum(argv[:3] == ("tc", "qdisc", "del") for argv in ran) == 2


def test_a_delay_without_netem_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(netns: str | None, *argv: str, check: bool = True) -> str:
        return "Error: Specified qdisc kind is unknown." if "netem" in argv else ""

    monkeypatch.setattr(links, "_run", run)
    with pytest.raises(UserError, match=r"link delay 0.5 ms: this kernel has no netem qdisc"):
        links.apply(LinkShape(delay_ms=0.5), "aitaxn0", "aitax-node-0", "eth0")


def test_each_node_has_its_own_names_and_address() -> None:
    nodes = [Node(index) for index in range(3)]
    assert [n.name for n in nodes] == ["aitax-node-0", "aitax-node-1", "aitax-node-2"]
    assert [n.ip for n in nodes] == ["10.243.0.11", "10.243.0.12", "10.243.0.13"]
    assert len({n.host_device for n in nodes}) == 3 and all(len(n.host_device) <= 15 for n in nodes)
    assert nodes[2].inside(["kubelet"]) == ["nsenter", "--net=/var/run/netns/aitax-node-2", "--", "kubelet"]
