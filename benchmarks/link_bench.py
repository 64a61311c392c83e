"""A shaped link limits a broker's replication traffic to its rate (issue 37's shaped links, measured).

On `aitax cluster` (3 or more nodes) with a release of the chart, a benchmark topic of one partition led by broker
0 and followed by brokers 1 and 2 takes Kafka's own producer benchmark inside broker 0's pod (acks=1, so the
producer is not held back by its followers), at three times the link's rate, with the release's own producers
paused. The node of broker 1 has its link shaped (`aitax cluster link`), so broker 1 can fetch its replica no
faster than the link carries it. Over a window after a warm-up, this measures broker 1's replication bytes in (its
JMX exporter's ReplicationBytesInPerSec, payload) and the bytes its node received on the link (the machine's end of
it, every header counted), and compares both to the set rate. Then the link is unshaped under the same load: the
follower catches up on what the shaped links held back, as fast as the machine carries it, which shows the shaping
is what limited.

    .venv/bin/python benchmarks/link_bench.py [--rates 10mbit,20mbit] [--seconds 30] [--namespace aitax]

Prints one row per link: set rate, replication payload and wire rate into the node, and each as a share of the
set rate (target: wire within 10% of the rate, payload at most the rate). Not a test: the machine is shared.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TOPIC = "link-bench"
RECORD_BYTES = 1000
WARMUP_S = 10.0
TOLERANCE = 0.10
OFFERED = 3  # the producer offers this many times the link's rate: the link, not the producer, must limit


# The broker's own identity (a super user), as the chart's tools use it.
CLIENT = ("printf '%s\\n' security.protocol=SSL ssl.keystore.type=PEM "
          "ssl.keystore.location=/etc/kafka/tls/keystore.pem ssl.truststore.type=PEM "
          "ssl.truststore.location=/etc/kafka/tls/ca.crt > /tmp/bench.properties; ")
TOOL = "/opt/kafka/bin/kafka-tool"
TOPICS = (f"{TOOL} org.apache.kafka.tools.TopicCommand --bootstrap-server localhost:9092 "
          "--command-config /tmp/bench.properties")


class Bench:
    """The release's brokers and broker 1's node, through kubectl and the node's link counters."""

    def __init__(self, cluster, namespace: str, release: str) -> None:
        from aitax.cluster.demo import fullname
        from aitax.cluster.node import NODE_PREFIX, Node

        self.cluster, self.namespace, self.release = cluster, namespace, release
        self.kafka = f"{fullname(release)}-kafka"
        self.follower = Node(int(self.kubectl("get", "pod", f"{self.kafka}-1", "-o", "jsonpath={.spec.nodeName}")
                                 .removeprefix(NODE_PREFIX)))

    def kubectl(self, *command: str, timeout_s: float = 300) -> str:
        return self.cluster.kubectl("-n", self.namespace, *command, timeout_s=timeout_s).stdout

    def in_broker(self, index: int, script: str) -> str:
        return self.kubectl("exec", f"{self.kafka}-{index}", "--", "bash", "-c", script)

    def replication_in(self) -> float:
        scraped = self.in_broker(1, "exec 3<>/dev/tcp/127.0.0.1/9404; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; "
                                    "cat <&3")
        # Kafka meters replication per broker only (no topic): the release's own producers are paused meanwhile.
        match = re.search(r"^kafka_server_brokertopicmetrics_replicationbytesin_total\s+([0-9.eE+]+)", scraped,
                          re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    def link_in(self) -> int:
        return int(Path(f"/sys/class/net/{self.follower.host_device}/statistics/tx_bytes").read_text())

    def producers(self) -> list[tuple[str, str]]:
        """The release's own producing Deployments and their replicas: they would share the link."""
        listed = self.kubectl("get", "deploy", "-l", f"app.kubernetes.io/instance={self.release},"
                              "app.kubernetes.io/component in (emulate-producers,ingest-detect,ingest)", "-o",
                              "jsonpath={range .items[*]}{.metadata.name}={.spec.replicas}{'\\n'}{end}")
        return [tuple(line.split("=")) for line in listed.split() if "=" in line]  # type: ignore[misc]

    def measure(self, rate_mbit: float | None, offered_mbit: float, seconds: float) -> tuple[float, float]:
        """(replication payload, wire into the node) in Mbit/s over `seconds`, the link shaped to `rate_mbit`."""
        from aitax.cluster.links import LinkShape

        self.cluster.reshape(LinkShape(rate_mbit=rate_mbit), [self.follower])
        records_per_s = int(offered_mbit * 1e6 / 8 / RECORD_BYTES)
        producer = subprocess.Popen(
            [*self.cluster.kubectl_argv(), "-n", self.namespace, "exec", f"{self.kafka}-0", "--", "sh", "-c",
             CLIENT + f"{TOOL} org.apache.kafka.tools.ProducerPerformance --topic {TOPIC} "
             f"--num-records {int(records_per_s * (WARMUP_S + seconds + 5))} --record-size {RECORD_BYTES} "
             f"--throughput {records_per_s} --producer.config /tmp/bench.properties "
             "--producer-props bootstrap.servers=localhost:9092 acks=1 linger.ms=5"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(WARMUP_S)
            start, payload0, wire0 = time.monotonic(), self.replication_in(), self.link_in()
            time.sleep(seconds)
            elapsed = time.monotonic() - start
            return ((self.replication_in() - payload0) * 8 / elapsed / 1e6,
                    (self.link_in() - wire0) * 8 / elapsed / 1e6)
        finally:
            producer.terminate()
            producer.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10mbit,20mbit",
                        help="link rates to measure, comma-separated: well under what the machine carries unshaped")
    parser.add_argument("--seconds", type=float, default=30.0, help="measurement window per link")
    parser.add_argument("--namespace", default="aitax")
    parser.add_argument("--release", default="aitax")
    args = parser.parse_args(argv)

    from aitax.cluster.links import LinkShape, parse_rate
    from aitax.cluster.real_cluster import RealCluster

    cluster = RealCluster()
    if not cluster.is_running() or len(cluster.node_list) < 3:
        raise SystemExit("link_bench: needs `aitax cluster up --nodes 3` running, with a release of the chart")
    bench = Bench(cluster, args.namespace, args.release)
    rates = [(text, parse_rate(text)) for text in args.rates.split(",")]
    bench.in_broker(0, CLIENT + f"{TOPICS} --create --if-not-exists --topic {TOPIC} --replica-assignment 0:1:2 "
                               "--config retention.ms=120000")
    producers = bench.producers()
    rows = []
    try:
        for deployment, _ in producers:
            bench.kubectl("scale", "deploy", deployment, "--replicas=0")
        for label, rate_mbit in [*rates, ("unshaped", None)]:
            offered = OFFERED * (rate_mbit or max(rate for _, rate in rates))
            payload, wire = bench.measure(rate_mbit, offered, args.seconds)
            rows.append((label, rate_mbit, offered, payload, wire))
            print(f"{label}: offered {offered:.0f} Mbit/s, replication {payload:.1f}, link {wire:.1f} Mbit/s",
                  flush=True)
            time.sleep(5)  # the follower catches up before the next link
    finally:
        cluster.reshape(LinkShape(), [bench.follower])
        for deployment, replicas in producers:
            bench.kubectl("scale", "deploy", deployment, f"--replicas={replicas}")
        bench.in_broker(0, CLIENT + f"{TOPICS} --delete --topic {TOPIC}")
    print(f"\nbroker 1 on {bench.follower.name}, following one partition led by broker 0 (acks=1, "
          f"{RECORD_BYTES} B records, offered {OFFERED}x the rate)")
    return 0 if print_rows(rows) else 1


def print_rows(rows: list[tuple[str, float | None, float, float, float]]) -> bool:
    """The table, and whether every shaped link held its rate."""
    print(f"{'link':<10}{'offered':>9}{'replication':>13}{'on the link':>13}{'share':>8}  verdict")
    held = True
    for label, rate_mbit, offered, payload, wire in rows:
        if rate_mbit is None:
            print(f"{label:<10}{offered:>9.0f}{payload:>13.1f}{wire:>13.1f}{'-':>8}  baseline: catching up")
            continue
        ok = abs(wire / rate_mbit - 1) <= TOLERANCE and payload <= rate_mbit * (1 + TOLERANCE)
        held &= ok
        print(f"{label:<10}{offered:>9.0f}{payload:>13.1f}{wire:>13.1f}{wire / rate_mbit:>8.2f}  "
              f"{'held' if ok else 'NOT held'}: wire within {TOLERANCE:.0%} of {rate_mbit:g} Mbit/s")
    return held


if __name__ == "__main__":
    raise SystemExit(main())
