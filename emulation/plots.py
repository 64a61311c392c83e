"""The sweep as a terminal table and as the paper's Fig. 10 (latency, throughput) and Fig. 11 (bandwidth)."""

from __future__ import annotations

from pathlib import Path

from ground.paper import BROKER_WAIT_SHARE


def print_table(document: dict) -> None:
    print(f"\nemulation {document['run_id']}: profile {document['profile']}, {document['brokers']} brokers x "
          f"{document['drives_per_broker']} log dirs, {document['duration_s']:.0f} s per factor")
    print(f"{'factor':>6} {'verdict':<9}{'offered/s':>10}{'achieved/s':>11}{'e2e mean':>10}{'e2e p99':>9}"
          f"{'broker wait':>12}{'paper':>7}{'disk MB/s':>10}{'cpu':>6}  saturated")
    for f in document["factors"]:
        latency = f["latency"] or {}
        share = latency.get("broker_wait_share")
        paper = BROKER_WAIT_SHARE.get(int(f["factor"]) if float(f["factor"]).is_integer() else -1)
        print(f"{f['factor']:>5g}x {'stable' if f['stable'] else 'UNSTABLE':<9}{f['offered_faces_per_s']:>10.0f}"
              f"{f['achieved_faces_per_s']:>11.0f}{latency.get('mean_ms', float('nan')):>8.0f}ms"
              f"{latency.get('p99_ms', float('nan')):>7.0f}ms"
              f"{(share or 0):>11.0%} {'' if paper is None else f'{paper:.0%}':>6}"
              f"{f['broker_disk_write_bytes_per_s'] / 1e6:>10.1f}{f['machine_cpu_busy']:>6.0%}  {f['saturated']}")
        for reason in f["reasons"]:
            print(f"{'':>16}{reason}")
    best = document["highest_stable_factor"]
    print(f"highest stable factor: {'none' if best is None else f'{best:g}x'} (paper, 3 brokers x 1 NVMe: 6x)")


def write_plots(document: dict, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    factors = [f["factor"] for f in document["factors"]]
    stages = ("schedule_delay", "ingest", "frame_queue", "detect", "broker_wait", "identify")

    figure, (latency_axis, throughput_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    bottom = [0.0] * len(factors)
    for stage in stages:
        values = [(f["latency"] or {}).get("breakdown_ms", {}).get(stage, 0.0) for f in document["factors"]]
        latency_axis.bar(range(len(factors)), values, bottom=bottom, label=stage)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for index, f in enumerate(document["factors"]):
        if not f["stable"]:
            latency_axis.annotate("unstable", (index, bottom[index]), ha="center", va="bottom", color="red")
    latency_axis.set(title="Fig. 10a: mean end-to-end latency by stage", xlabel="AI acceleration factor",
                     ylabel="ms", xticks=range(len(factors)), xticklabels=[f"{x:g}x" for x in factors])
    latency_axis.legend(fontsize=8)
    throughput_axis.plot(factors, [f["offered_faces_per_s"] for f in document["factors"]], "k--", label="offered")
    throughput_axis.plot(factors, [f["achieved_faces_per_s"] for f in document["factors"]], "o-", label="achieved")
    throughput_axis.set(title="Fig. 10b: throughput", xlabel="AI acceleration factor", ylabel="faces/s",
                        xscale="log", yscale="log")
    throughput_axis.legend()
    figure.tight_layout()
    fig10 = folder / "fig10_latency_throughput.png"
    figure.savefig(fig10, dpi=110)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(7, 4.5))
    axis.plot(factors, [f["broker_disk_write_bytes_per_s"] / 1e6 for f in document["factors"]], "o-",
              label="broker storage write (per broker)")
    axis.plot(factors, [f["broker_disk_read_bytes_per_s"] / 1e6 for f in document["factors"]], "o-",
              label="broker storage read (per broker)")
    axis.plot(factors, [f["loopback_bytes_per_s"] / 1e6 for f in document["factors"]], "s--",
              label="network (loopback, all)")
    axis.set(title="Fig. 11: bandwidth under acceleration", xlabel="AI acceleration factor", ylabel="MB/s",
             xscale="log")
    axis.legend()
    figure.tight_layout()
    fig11 = folder / "fig11_bandwidth.png"
    figure.savefig(fig11, dpi=110)
    plt.close(figure)
    return [fig10, fig11]
