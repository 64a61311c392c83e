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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10mbit,20mbit",
                        help="link rates to measure, comma-separated: well under what the machine carries unshaped")
    parser.add_argument("--seconds", type=float, default=30.0, help="measurement window per link")
    parser.add_argument("--namespace", default="aitax")
    parser.add_argument("--release", default="aitax")
    args = parser.parse_args(argv)

    from cluster.demo import fullname
    from cluster.links import LinkShape, parse_rate
    from cluster.node import NODE_PREFIX, Node, RealCluster

    cluster = RealCluster()
    if not cluster.is_running() or len(cluster.node_list) < 3:
        raise SystemExit("link_bench: needs `aitax cluster up --nodes 3` running, with a release of the chart")
    kafka = f"{fullname(args.release)}-kafka"

    def kubectl(*command: str, timeout_s: float = 300) -> str:
        return cluster.kubectl("-n", args.namespace, *command, timeout_s=timeout_s).stdout

    def in_broker(index: int, script: str, timeout_s: float = 300) -> str:
        return kubectl("exec", f"{kafka}-{index}", "--", "bash", "-c", script, timeout_s=timeout_s)

    # The broker's own identity (a super user), as the chart's tools use it.
    client = ("printf '%s\\n' security.protocol=SSL ssl.keystore.type=PEM "
              "ssl.keystore.location=/etc/kafka/tls/keystore.pem ssl.truststore.type=PEM "
              "ssl.truststore.location=/etc/kafka/tls/ca.crt > /tmp/bench.properties; ")
    tool = "/opt/kafka/bin/kafka-tool"
    follower = Node(int(kubectl("get", "pod", f"{kafka}-1", "-o", "jsonpath={.spec.nodeName}")
                        .removeprefix(NODE_PREFIX)))
    in_broker(0, client + f"{tool} org.apache.kafka.tools.TopicCommand --bootstrap-server localhost:9092 "
                 f"--command-config /tmp/bench.properties --create --if-not-exists --topic {TOPIC} "
                 "--replica-assignment 0:1:2 --config retention.ms=120000")

    def replication_in() -> float:
        scraped = in_broker(1, "exec 3<>/dev/tcp/127.0.0.1/9404; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; "
                               "cat <&3")
        # Kafka meters replication per broker only (no topic): the release's own producers are paused meanwhile.
        match = re.search(r"^kafka_server_brokertopicmetrics_replicationbytesin_total\s+([0-9.eE+]+)", scraped,
                          re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    def link_in() -> int:
        return int(Path(f"/sys/class/net/{follower.host_device}/statistics/tx_bytes").read_text())

    producers = [line for line in kubectl(
        "get", "deploy", "-l", f"app.kubernetes.io/instance={args.release},"
        "app.kubernetes.io/component in (emulate-producers,ingest-detect,ingest)",
        "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.replicas}{'\\n'}{end}").split() if "=" in line]
    rows = []
    try:
        for name in producers:  # the release's own load would share the link
            kubectl("scale", "deploy", name.split("=")[0], "--replicas=0")
        for label, rate_mbit in [*((r, parse_rate(r)) for r in args.rates.split(",")), ("unshaped", None)]:
            cluster.reshape(LinkShape(rate_mbit=rate_mbit), [follower])
            offered_mbit = OFFERED * (rate_mbit or max(parse_rate(r) for r in args.rates.split(",")))
            records_per_s = int(offered_mbit * 1e6 / 8 / RECORD_BYTES)
            seconds = WARMUP_S + args.seconds
            producer = subprocess.Popen(
                [*cluster.kubectl_argv(), "-n", args.namespace, "exec", f"{kafka}-0", "--", "sh", "-c", client +
                 f"{tool} org.apache.kafka.tools.ProducerPerformance --topic {TOPIC} "
                 f"--num-records {int(records_per_s * (seconds + 5))} --record-size {RECORD_BYTES} "
                 f"--throughput {records_per_s} --producer.config /tmp/bench.properties "
                 "--producer-props bootstrap.servers=localhost:9092 acks=1 linger.ms=5"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(WARMUP_S)
            start, payload0, wire0 = time.monotonic(), replication_in(), link_in()
            time.sleep(args.seconds)
            elapsed = time.monotonic() - start
            payload = (replication_in() - payload0) * 8 / elapsed / 1e6
            wire = (link_in() - wire0) * 8 / elapsed / 1e6
            producer.terminate()
            producer.wait(timeout=60)
            rows.append((label, rate_mbit, offered_mbit, payload, wire))
            print(f"{label}: offered {offered_mbit:.0f} Mbit/s, replication {payload:.1f}, link {wire:.1f} Mbit/s",
                  flush=True)
            time.sleep(5)  # the follower catches up before the next link
    finally:
        cluster.reshape(LinkShape(), [follower])
        for name in producers:
            deployment, replicas = name.split("=")
            kubectl("scale", "deploy", deployment, f"--replicas={replicas}")
        in_broker(0, client + f"{tool} org.apache.kafka.tools.TopicCommand --bootstrap-server localhost:9092 "
                     f"--command-config /tmp/bench.properties --delete --topic {TOPIC}")

    print(f"\nbroker 1 on {follower.name}, following one partition led by broker 0 (acks=1, "
          f"{RECORD_BYTES} B records, offered {OFFERED}x the rate)")
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
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
