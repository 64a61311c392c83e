"""The sweep as a terminal table and as the paper's Fig. 10 (latency, throughput) and Fig. 11 (utilisation beside
the paper's, and bandwidth)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aitax.common.paper import NETWORK_SHARE_AT_8X, STORAGE_WRITE_SHARE
from aitax.runs.applications import FACE_RECOGNITION, application
from aitax.runs.results import FactorRuns, RunResult, SweepResult, format_spread
from aitax.telemetry.latency import BREAKDOWN
from aitax.telemetry.quantiles import min_samples, quantile_key


def print_table(sweep: SweepResult) -> None:
    print("\n" + "\n".join(format_table(sweep)))


def format_table(sweep: SweepResult) -> list[str]:
    """One row per point: medians with their min-max over repeats, quantiles from the repeats' merged
    histograms (a `*` where the windows held too few faces for one), each point's verdict as repeats that held."""
    lines: list[str] = []
    quantiles = [quantile_key(q) for q in sweep.quantiles]
    width = max([6, *(len(group.label) for group in sweep.by_factor())])
    repeats = f", {sweep.repeats} repeats: median (min-max)" if sweep.repeats > 1 else ""
    lines.append(f"emulation {sweep.run_id}: profile {sweep.profile}, {sweep.brokers} brokers x "
          f"{sweep.drives_per_broker} log dirs, {sweep.duration_s:.0f} s per run{repeats}"
          + "".join(sorted({f", testbed {run.testbed}" for run in sweep.runs if run.testbed})))
    lines.append(f"{'point':>{width}} {'verdict':<18}{'offered/s':>10}{'achieved/s':>18}{'backlog':>9}"
                 f"{'e2e mean ms':>20}"
          + "".join(f"{q:>9}" for q in quantiles)
          + f"{'max':>8}{'broker wait':>12}{'paper':>7}{'disk MB/s':>10}{'util':>6}{'cpu':>6}  saturated (last repeat)")
    flagged = False
    app = application(sweep.runs[0].workload.application if sweep.runs else FACE_RECOGNITION.name)
    knee = sweep.knee
    for factor in sweep.by_factor():
        last = factor.runs[-1]
        past_knee = factor.in_flight is None and knee is not None and factor.factor >= knee.factor
        verdict = (f"{'stable' if factor.stable else 'UNSTABLE'}{'+knee' if past_knee else ''} "
                   f"{factor.stable_repeats}/{len(factor.runs)}")
        tail = factor.tail(sweep.quantiles)
        cells = []
        for q in quantiles:
            value = tail.quantiles_ms[q] if tail else float("nan")
            mark = "*" if tail is not None and q in tail.too_few_samples else ""
            flagged = flagged or bool(mark)
            cells.append(f"{value:>8.0f}{mark or ' '}")
        paper = app.paper_broker_wait_share.get(int(factor.factor) if factor.factor.is_integer() else -1)
        share = factor.spread(lambda run: run.latency.broker_wait_share if run.latency else None)
        disk = factor.spread(lambda run: run.resources.broker_disk_write_bytes_per_s / 1e6)
        util = factor.spread(storage_utilisation)
        cpu = factor.spread(lambda run: run.resources.machine_cpu_busy)
        offered = "-" if last.offered_faces_per_s is None else f"{last.offered_faces_per_s:.0f}"
        lines.append(f"{factor.label:>{width}} {verdict:<18}{offered:>10}"
                     f"{format_spread(factor.spread(lambda run: run.achieved_faces_per_s)):>18}"
                     f"{last.backlog_faces:>9}"
                     f"{format_spread(factor.spread(lambda run: run.latency.mean_ms if run.latency else None)):>20}"
                     + "".join(cells)
                     + f"{tail.max_ms if tail else float('nan'):>8.0f}{(share.median if share else 0):>11.0%} "
                     f"{'' if paper is None else f'{paper:.0%}':>6}{disk.median:>10.1f}"
                     f"{'-' if util is None else f'{util.median:.0%}':>6}{cpu.median:>6.0%}  "
                     f"{last.resources.saturated}")
        for run in factor.runs:
            for reason in run.verdict.reasons:
                lines.append(f"{'':>{width + 15}}{f'repeat {run.repeat}: ' if len(factor.runs) > 1 else ''}{reason}")
    if flagged:
        lines.append("* fewer faces in the measurement windows than the quantile needs (10 / (1 - q)): "
                     "not to be trusted")
    if sweep.stopped:
        lines.append(f"stopped: {sweep.stopped}")
    best = sweep.highest_stable_factor
    if sweep.latency_bound is not None:
        quantile, bound_ms = sweep.latency_bound
        at_best = next((group for group in sweep.by_factor() if group.factor == best), None)
        rate = at_best.spread(lambda run: run.achieved_faces_per_s) if at_best else None
        lines.append(f"latency-bounded throughput ({quantile_key(quantile)} <= {bound_ms:g} ms, every condition "
                     f"held, {sweep.brokers} brokers): " + ("none in range" if best is None or rate is None
                                                            else f"{best:.3g}x, {rate.median:.0f} faces/s"))
    elif any(group.in_flight is None for group in sweep.by_factor()):
        paper = app.paper_sweep
        runaway = sweep.highest_stable_by_runaway
        if sweep.skipped_factors and not sweep.stopped:
            lines.append(f"not run (--stop-after: the sweep ended past the knee): "
                         f"{', '.join(f'{f:g}x' for f in sweep.skipped_factors)}")
        lines.append(f"knee: {'none in range' if knee is None else f'{knee.factor:g}x, {knee.reason}'}")
        lines.append(f"the paper's test alone (every condition of a run, latency not running away within it): "
                     f"{'none' if runaway is None else f'{runaway:g}x'}")
        lines.append(f"highest stable factor: {'none' if best is None else f'{best:g}x'} ({paper})")
    return lines


def write_plots(sweep: SweepResult, folder: Path) -> list[Path]:
    """Fig. 10 and 11 from the open-loop factors' medians over their repeats, the latency tail of every point,
    and throughput against latency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    open_loop = [group for group in sweep.by_factor() if group.in_flight is None]
    written = _fig10_fig11(open_loop, folder, plt) if open_loop else []
    return [*written, _quantile_plot(sweep, folder, plt), _trajectory(sweep, folder, plt)]


def storage_utilisation(run: RunResult) -> float | None:
    """The busiest broker's log-dir device, as the block layer read it (None: not read)."""
    shares = run.resources.broker_storage_utilisation if run.resources else {}
    return max(shares.values()) if shares else None


def _median(group: FactorRuns, value) -> float:
    return _median_or_none(group, value) or 0.0


def _median_or_none(group: FactorRuns, value) -> float | None:
    spread = group.spread(value)
    return spread.median if spread else None


def _fig10_fig11(groups: list[FactorRuns], folder: Path, plt) -> list[Path]:
    factors = [group.factor for group in groups]
    figure, (latency_axis, throughput_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    bottom = [0.0] * len(factors)
    colors = plt.get_cmap("tab20")  # one color a stage: there are more stages than the default cycle's ten
    for index, (stage, _, _) in enumerate(BREAKDOWN):
        values = [_median(g, lambda run, s=stage: run.latency.breakdown_ms.get(s) if run.latency else None)
                  for g in groups]
        latency_axis.bar(range(len(factors)), values, bottom=bottom, label=stage, color=colors(index))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for index, group in enumerate(groups):
        if not group.stable:
            latency_axis.annotate("unstable", (index, bottom[index]), ha="center", va="bottom", color="red")
    latency_axis.set(title="Fig. 10a: mean end-to-end latency by stage", xlabel="AI acceleration factor",
                     ylabel="ms", xticks=range(len(factors)), xticklabels=[f"{x:.3g}x" for x in factors])
    latency_axis.legend(fontsize=8)
    throughput_axis.plot(factors, [_median(g, lambda run: run.offered_faces_per_s) for g in groups], "k--",
                         label="offered")
    throughput_axis.plot(factors, [_median(g, lambda run: run.achieved_faces_per_s) for g in groups], "o-",
                         label="achieved")
    throughput_axis.set(title="Fig. 10b: throughput", xlabel="AI acceleration factor", ylabel="faces/s",
                        xscale="log", yscale="log")
    throughput_axis.legend()
    fig10 = _save(figure, folder / "fig10_latency_throughput.png", plt)

    figure, (share_axis, axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    def busiest(field: str):
        return lambda run: max(getattr(run.resources, field).values(), default=None) if run.resources else None

    for label, value, style in (
            ("broker storage (busiest device)", storage_utilisation, "o-"),
            ("brokers' links (locally: loopback over the design's link)", busiest("broker_link_busy"), "s--"),
            ("brokers' CPU slices (busiest)", busiest("broker_cpu_slice_busy"), "^:")):
        shares = [_median_or_none(g, value) for g in groups]
        if any(share is not None for share in shares):
            share_axis.plot(factors, [100 * (share or 0.0) for share in shares], style, label=label)
    share_axis.plot(list(STORAGE_WRITE_SHARE), [100 * v for v in STORAGE_WRITE_SHARE.values()], "k*", markersize=12,
                    label="paper: storage writes (Sec. 5.4)")
    share_axis.plot([8], [100 * NETWORK_SHARE_AT_8X], "kx", markersize=10, label="paper: network at 8x")
    share_axis.set(title="Fig. 11b: utilisation under acceleration", xlabel="AI acceleration factor",
                   ylabel="% of capacity", xscale="log", ylim=(0, 105))
    ticks = sorted({*factors, *STORAGE_WRITE_SHARE})
    share_axis.set_xticks(ticks, [f"{x:g}x" for x in ticks])
    share_axis.minorticks_off()
    share_axis.legend(fontsize=8)
    for label, value, style in (
            ("broker storage write (per broker)", lambda run: run.resources.broker_disk_write_bytes_per_s, "o-"),
            ("broker storage read (per broker)", lambda run: run.resources.broker_disk_read_bytes_per_s, "o-"),
            ("network (loopback, all)", lambda run: run.resources.loopback_bytes_per_s, "s--")):
        axis.plot(factors, [_median(g, value) / 1e6 for g in groups], style, label=label)
    axis.set(title="Fig. 11a: bandwidth under acceleration", xlabel="AI acceleration factor", ylabel="MB/s",
             xscale="log")
    axis.set_xticks(factors, [f"{x:g}x" for x in factors])
    axis.minorticks_off()
    axis.legend()
    fig11 = _save(figure, folder / "fig11_bandwidth.png", plt)
    return [fig10, fig11]


def _quantile_plot(sweep: SweepResult, folder: Path, plt) -> Path:
    figure, axis = plt.subplots(figsize=(7, 4.5))
    # Log-probability axis: x = 1 / (1 - q), so p90, p99 and p99.9 are evenly spaced and the tail is visible.
    grid = [0.0, *(1 - 10 ** -k for k in np.linspace(0.01, 4, 200))]  # even steps along that axis
    for group in sweep.by_factor():
        tail = group.tail(grid)
        if tail is None:
            continue
        usable = [q for q in grid if tail.count >= min_samples(q)]
        axis.plot([1 / (1 - q) for q in usable], [tail.quantiles_ms[quantile_key(q)] for q in usable],
                  label=f"{group.label} ({tail.count} faces)")
    axis.set(title="End-to-end latency by quantile (where the sample suffices)", xscale="log", yscale="log",
             xlabel="quantile", ylabel="ms")
    ticks = (0.5, 0.9, 0.99, 0.999, 0.9999)
    axis.set_xticks([1 / (1 - q) for q in ticks], [quantile_key(q) for q in ticks])
    axis.legend(fontsize=8)
    return _save(figure, folder / "latency_quantiles.png", plt)


def _trajectory(sweep: SweepResult, folder: Path, plt) -> Path:
    """Throughput against latency, one line per loop: open-loop points by factor, closed-loop points by frames
    in flight (a concurrency sweep traces where more load stops buying throughput and only adds latency)."""
    figure, axis = plt.subplots(figsize=(7, 4.5))
    groups = sweep.by_factor()
    for name, members in (("open loop", [g for g in groups if g.in_flight is None]),
                          ("closed loop", [g for g in groups if g.in_flight is not None])):
        points = [(g, g.spread(lambda run: run.achieved_faces_per_s), g.tail([0.5, 0.99])) for g in members]
        points = [(g, rate, tail) for g, rate, tail in points if rate is not None and tail is not None]
        if not points:
            continue
        for key, style in (("p50", "o-"), ("p99", "s--")):
            axis.plot([rate.median for _, rate, _ in points], [tail.quantiles_ms[key] for _, _, tail in points],
                      style, label=f"{name}, {key}")
        for group, rate, tail in points:
            axis.annotate(f"{group.in_flight}" if group.in_flight else f"{group.factor:.3g}x",
                          (rate.median, tail.quantiles_ms["p99"]), fontsize=7, textcoords="offset points",
                          xytext=(3, 3))
    axis.set(title="Throughput vs end-to-end latency (points: factor, or frames in flight)",
             xlabel="achieved faces/s (median over repeats)", ylabel="ms", yscale="log")
    axis.legend(fontsize=8)
    return _save(figure, folder / "throughput_latency.png", plt)


def _save(figure, path: Path, plt) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_html(sweep: SweepResult, figures: list[Path], path: Path) -> Path:
    """One self-contained page: the table as printed, then every plot."""
    import html

    from aitax.reporting.report_render import html_figure, html_page

    images = "".join(html_figure(figure.stem.replace("_", " "), figure.read_bytes()) for figure in figures)
    body = f"<pre>{html.escape(chr(10).join(format_table(sweep)))}</pre>\n<h2>Figures</h2>\n{images}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html_page(f"Emulation {sweep.run_id}", body), encoding="utf-8")
    return path
