"""Event logging cost and Elasticsearch indexing rate, against the local stack's Elasticsearch.

    .venv/bin/python benchmarks/telemetry_bench.py [--events 50000]

Prints the stage-side cost of `emit` per event for each sink (what a stage pays: the target is under 1% of a
frame's detection time), and the sustained rate at which the background thread bulk-indexes into the local
Elasticsearch. Not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

EVENTS_PER_FRAME = 2 + 2 * 0.64  # ingest + detect per frame, broker_wait + identify per face (0.64 faces/frame)
DETECT_MS_PER_FRAME = 110.0  # measured by pipeline_bench.py at min face 40


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=50_000, help="events per sink (default 50000)")
    args = parser.parse_args()

    from aitax.stack.stack import current_config, use_local_identity
    from aitax.telemetry.elastic import ElasticsearchSink
    from aitax.telemetry.elastic_access import client
    from aitax.telemetry.events import INDEX_PREFIX, Event
    from aitax.telemetry.sinks import JsonlSink, NullSink

    config = current_config()
    use_local_identity(None)  # the benchmark is the operator: the admin principal
    if config is None or not config.elasticsearch:
        print("benchmark needs the local stack with Elasticsearch: `aitax stack up`", file=sys.stderr)
        return 2
    run_id = f"bench-{time.time_ns()}"
    base = time.time_ns()
    events = [Event(run_id=run_id, stage="detect", stream_id=f"cam-{i % 8}", frame_index=i,
                    wall_start_ns=base + i, wall_end_ns=base + i + 100_000_000, compute_time_ms=100.0, face_count=1,
                    data_size_bytes=37_300, substeps_ms={"pnet": 40.0, "rnet": 10.0, "onet": 5.0, "other": 45.0})
              for i in range(args.events)]
    workdir = Path(tempfile.mkdtemp())
    sinks = {"none": NullSink(), "jsonl": JsonlSink(workdir / "events.jsonl"),
             "elasticsearch": ElasticsearchSink(config.elasticsearch_url, workdir / "spool.jsonl")}
    print(f"{len(events)} events per sink; load {os.getloadavg()[0]:.2f}")
    print(f"{'sink':<14}{'µs/event':>10}{'% of detect CPU':>18}")
    shipped_at = 0.0
    for name, sink in sinks.items():
        started = time.perf_counter()
        for event in events:
            sink.emit(event)
        cost_us = (time.perf_counter() - started) / len(events) * 1e6
        share = cost_us * EVENTS_PER_FRAME / (DETECT_MS_PER_FRAME * 1000) * 100
        print(f"{name:<14}{cost_us:>10.2f}{share:>17.3f}%")
        if name == "elasticsearch":
            shipped_at = started
        sink.close()
    es = client(config.elasticsearch_url)
    es.indices.refresh(index=f"{INDEX_PREFIX}-*")
    indexed = es.count(index=f"{INDEX_PREFIX}-*", query={"term": {"run_id": run_id}})["count"]
    elapsed = time.perf_counter() - shipped_at
    print(f"\nElasticsearch: {indexed}/{len(events)} indexed in {elapsed:.1f} s: {indexed / elapsed:,.0f} events/s "
          f"sustained (one background thread, batches of 500)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
