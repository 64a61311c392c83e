"""The run report on a hand-built run where every figure is known exactly.

Two streams, six frames, six faces (one never identified). Times are ms after T0; each face's stages:

    face          ingest  queue  detect  broker  identify   e2e   identified at
    cam-1 0/0       10     10      40      40      100       200      200
    cam-1 0/1       10     10      40     240      100       400      400
    cam-1 2/0       10      0      40      50      100       200     2200
    cam-2 0/0       20     10      50    1020      200      1300     1300
    cam-2 1/0       10      0      80     210      200       500     1500
    mean            12      6      50     312      140       520

Each broker wait by owner: produce, consumer busy, in Kafka, client queue (each identity is durable the moment it
is made, deliver 0, unless a test says otherwise):

    cam-1 0/0       10      0     20     10
    cam-1 0/1       20    200     10     10
    cam-1 2/0       10      0     30     10
    cam-2 0/0       10   1000      0     10
    cam-2 1/0       10    180     10     10
    mean            12    276     14     10
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from aitax.cli import main
from aitax.commands.report import report as report_command
from aitax.common.errors import UserError
from aitax.reporting.report import PAPER, Report, amdahl_speedup, build_report
from aitax.reporting.report_render import format_text, render_figures, render_html
from aitax.telemetry.event_sources import load_events
from aitax.telemetry.events import Event

RUN = "synthetic"
T0_NS = 1_700_000_000_000_000_000
INGEST_STEPS = {"decode": 6.0, "resize": 3.0, "other": 1.0}
DETECT_STEPS = {"pnet": 10.0, "rnet": 5.0, "onet": 5.0, "tf_support": 4.0, "numpy": 2.0, "crop": 8.0, "encode": 2.0,
                "kafka": 2.0, "events": 1.0, "other": 1.0}  # AI 20 of 40
IDENTIFY_STEPS = {"decode": 5.0, "embed": 70.0, "svm": 10.0, "kafka": 10.0, "events": 2.0, "other": 3.0}  # AI 80 of 100
# (stream, frame): ingest start, ingest end, detect start, detect end, faces found
FRAMES = {
    ("cam-1", 0): (0, 10, 20, 60, 2),
    ("cam-1", 1): (100, 110, 110, 150, 0),
    ("cam-1", 2): (2000, 2010, 2010, 2050, 1),
    ("cam-2", 0): (0, 20, 30, 80, 1),
    ("cam-2", 1): (1000, 1010, 1010, 1090, 1),
    ("cam-2", 2): (2000, 2020, 2030, 2100, 1),  # its face is still in the system when the run ends
}
# (stream, frame, face): broker append, consumer asked, fetched, identify start, identify end
FACES = {
    ("cam-1", 0, 0): (70, 70, 90, 100, 200),
    ("cam-1", 0, 1): (80, 280, 290, 300, 400),
    ("cam-1", 2, 0): (2060, 2060, 2090, 2100, 2200),
    ("cam-2", 0, 0): (90, 1090, 1090, 1100, 1300),
    ("cam-2", 1, 0): (1100, 1280, 1290, 1300, 1500),
}
OWNERS_MS = {"produce": 12.0, "consumer_busy": 276.0, "in_kafka": 14.0, "client_queue": 10.0}


def at(ms: float) -> int:
    return T0_NS + round(ms * 1_000_000)


def synthetic_events(run_id: str = RUN, identify_host: str = "edge-1") -> list[Event]:
    """The run in the module docstring, as the pipeline would emit it (plus one event of a stage reports skip)."""
    common = dict(run_id=run_id, acceleration_factor=1.0, kafka_client="confluent-kafka")
    events = []
    for (stream_id, frame_index), (ingest_start, ingest_end, detect_start, detect_end, faces) in FRAMES.items():
        frame = dict(stream_id=stream_id, frame_index=frame_index, host="edge-1", process=f"ingest-{stream_id}",
                     **common)
        events.append(Event(stage="ingest", wall_start_ns=at(ingest_start), wall_end_ns=at(ingest_end),
                            compute_time_ms=10.0, substeps_ms=INGEST_STEPS, **frame))
        events.append(Event(stage="detect", wall_start_ns=at(detect_start), wall_end_ns=at(detect_end),
                            compute_time_ms=40.0, face_count=faces, data_size_bytes=37_300 * faces,
                            substeps_ms=DETECT_STEPS, **frame))
    for (stream_id, frame_index, face_index), edges in FACES.items():
        appended, requested, fetched, identify_start, identify_end = edges
        detected = FRAMES[stream_id, frame_index][3]
        face = dict(stream_id=stream_id, frame_index=frame_index, face_index=face_index, host=identify_host,
                    process="identify-1", **common)
        events.append(Event(stage="broker_wait", wall_start_ns=at(detected), wall_end_ns=at(identify_start),
                            compute_time_ms=0.0, broker_append_ns=at(appended),
                            substeps_ms={"produce": appended - detected, "consumer_busy": requested - appended,
                                         "in_kafka": fetched - requested, "client_queue": identify_start - fetched},
                            **face))
        events.append(Event(stage="identify", wall_start_ns=at(identify_start), wall_end_ns=at(identify_end),
                            compute_time_ms=100.0, face_count=1, substeps_ms=IDENTIFY_STEPS,
                            delivered_ns=at(identify_end), **face))
    events.append(Event(stage="detect.inference", stream_id="cam-1", frame_index=0, wall_start_ns=at(20),
                        wall_end_ns=at(60), compute_time_ms=20.0, **common))
    return events


def synthetic_documents(**kwargs) -> list[dict]:
    return [event.to_document() for event in synthetic_events(**kwargs)]


def write_jsonl(folder: Path, documents: list[dict]) -> Path:
    """Two files, as two processes would write them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, part in (("ingest-detect", documents[::2]), ("identify", documents[1::2])):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in part))
    return folder


@pytest.fixture(scope="module")
def report() -> Report:
    return build_report(RUN, synthetic_documents())


def stage(report: Report, name: str):
    (found,) = [s for s in report.latency.stages if s.stage == name]
    return found


def test_end_to_end_latency_and_its_breakdown(report: Report) -> None:
    latency = report.latency
    assert latency.faces == 5
    assert (latency.e2e.count, latency.e2e.mean_ms, latency.e2e.p50_ms) == (5, 520.0, 400.0)
    assert latency.e2e.p99_ms == pytest.approx(500 + 0.96 * 800)  # rank 3.96 of 5, interpolated
    # Schema-1 events carry no schedule: end to end starts at capture, with no schedule delay.
    means = {"schedule_delay": 0.0, "ingest": 12.0, "frame_queue": 6.0, "detect": 50.0, **OWNERS_MS,
             "identify": 140.0, "deliver": 0.0}
    assert [s.stage for s in latency.stages] == list(means)
    for name, mean in means.items():
        assert stage(report, name).mean_ms == pytest.approx(mean)
        assert stage(report, name).share == pytest.approx(mean / 520)
    assert latency.broker_wait.mean_ms == pytest.approx(312.0) and latency.broker_wait.share == pytest.approx(0.6)
    assert math.fsum(s.share for s in latency.stages) == pytest.approx(1.0)


def test_end_to_end_ends_when_the_identity_is_durable() -> None:
    documents = synthetic_documents()
    for document in documents:
        if document["stage"] == "identify":  # every identity appended 15 ms after it was made
            document["delivered_ns"] = document["wall_end_ns"] + 15 * 1_000_000
    latency = build_report(RUN, documents).latency
    assert latency.e2e.mean_ms == pytest.approx(535.0)
    (deliver,) = [s for s in latency.stages if s.stage == "deliver"]
    assert deliver.mean_ms == pytest.approx(15.0) and deliver.standalone.p50_ms == pytest.approx(15.0)


def test_end_to_end_starts_at_the_schedule_when_events_carry_it() -> None:
    documents = synthetic_documents()
    for document in documents:
        if document["stage"] == "ingest":  # every frame started 30 ms after its schedule wanted it
            document["scheduled_ns"] = document["wall_start_ns"] - 30 * 1_000_000
    late = build_report(RUN, documents).latency
    assert late.e2e.mean_ms == pytest.approx(550.0)
    (delay,) = [s for s in late.stages if s.stage == "schedule_delay"]
    assert delay.mean_ms == pytest.approx(30.0) and delay.standalone.mean_ms == pytest.approx(30.0)


def test_tail_breakdown_and_standalone_p99(report: Report) -> None:
    latency = report.latency
    # Only cam-2 0/0 (1300 ms) is at or above the p99 of 1268 ms.
    assert (latency.tail_faces, latency.tail_e2e_mean_ms) == (1, 1300.0)
    tail = {"ingest": 20.0, "frame_queue": 10.0, "detect": 50.0, "produce": 10.0, "consumer_busy": 1000.0,
            "in_kafka": 0.0, "client_queue": 10.0, "identify": 200.0}
    for name, mean in tail.items():
        assert stage(report, name).tail_mean_ms == pytest.approx(mean)
        assert stage(report, name).tail_share == pytest.approx(mean / 1300)
    # Standalone: every event of the stage, frames (6) up to detection, faces (5) after.
    standalone = {
        "ingest": (6, 80 / 6, 10.0, 20.0),
        "frame_queue": (6, 5.0, 5.0, 10.0),
        "detect": (6, 320 / 6, 45.0, 70 + 0.95 * 10),
        "consumer_busy": (5, 276.0, 180.0, 200 + 0.96 * 800),
        "identify": (5, 140.0, 100.0, 200.0),
    }
    assert report.latency.broker_wait.tail_mean_ms == pytest.approx(1020.0)
    assert (report.latency.broker_wait.standalone.p50_ms, report.latency.broker_wait.standalone.p99_ms) == \
        pytest.approx((210.0, 240 + 0.96 * 780))
    for name, (count, mean, p50, p99) in standalone.items():
        distribution = stage(report, name).standalone
        assert distribution.count == count
        assert (distribution.mean_ms, distribution.p50_ms, distribution.p99_ms) == pytest.approx((mean, p50, p99))


def test_broker_wait_by_owner_names_the_dominant_part_on_one_clock(report: Report) -> None:
    broker = report.broker
    assert broker.faces == 5
    assert broker.parts_ms == pytest.approx(OWNERS_MS)
    assert broker.dominant == "consumer_busy"
    assert broker.clock == "one clock"


@pytest.mark.parametrize("older", ["schema 4: split at the append", "schema 1: the append time alone"])
def test_broker_wait_of_older_runs_reads_as_produce_and_in_kafka(older: str) -> None:
    documents = synthetic_documents()
    for document in documents:
        if document["stage"] == "broker_wait":
            appended = (document["broker_append_ns"] - document["wall_start_ns"]) / 1e6
            after = (document["wall_end_ns"] - document["broker_append_ns"]) / 1e6
            document["substeps_ms"] = {"producer_to_broker": appended, "broker_to_consumer": after}
            if older.startswith("schema 1"):
                del document["substeps_ms"]
        if document["stage"] == "identify":
            del document["delivered_ns"]
    broker = build_report(RUN, documents).broker
    assert broker.parts_ms == pytest.approx({"produce": 12.0, "consumer_busy": 0.0, "in_kafka": 300.0,
                                             "client_queue": 0.0})


def test_identify_on_another_host_means_several_clocks() -> None:
    broker = build_report(RUN, synthetic_documents(identify_host="core-1")).broker
    assert broker.clock == "several clocks: cross-host differences include clock offset"


def test_fig7_latency_and_faces_in_system_per_second(report: Report) -> None:
    load = report.load
    assert load.bucket_s == 1.0
    assert [(b.start_s, b.faces_finished, b.mean_e2e_ms) for b in load.buckets] == [
        (0.0, 2, 300.0), (1.0, 2, 900.0), (2.0, 1, 200.0)]
    # Time-averaged faces between detection end and identification: 1400 ms of faces in the first second,
    # 710 ms in the second, 250 ms in the last 200 ms (the unidentified face counts until the run's end).
    assert [b.faces_in_system for b in load.buckets] == pytest.approx([1.4, 0.71, 1.25])
    # Pearson over (300, 900, 200) and (1.4, 0.71, 1.25): sum dx*dy = -259, sum dx^2 = 860000/3, sum dy^2 = 0.2634.
    assert load.correlation == pytest.approx(-259 / math.sqrt(860_000 / 3 * 0.2634))


def test_fig8_substep_totals_shares_and_ai_share(report: Report) -> None:
    cpu = {p.kind: p for p in report.cpu.processes}
    assert list(cpu) == ["ingest", "detect", "identify"]
    assert (cpu["ingest"].events, cpu["detect"].events, cpu["identify"].events) == (6, 6, 5)
    assert cpu["ingest"].total_ms == {"decode": 36.0, "resize": 18.0, "other": 6.0}
    assert cpu["ingest"].share == pytest.approx({"decode": 0.6, "resize": 0.3, "other": 0.1})
    assert cpu["detect"].total_ms == {name: 6 * ms for name, ms in DETECT_STEPS.items()}
    assert cpu["detect"].share["pnet"] == pytest.approx(0.25)
    assert cpu["detect"].share["crop"] == pytest.approx(0.2)
    assert cpu["identify"].total_ms == {name: 5 * ms for name, ms in IDENTIFY_STEPS.items()}
    assert cpu["identify"].share["embed"] == pytest.approx(0.7)
    assert (cpu["ingest"].ai_share, cpu["detect"].ai_share, cpu["identify"].ai_share) == pytest.approx((0, 0.5, 0.8))
    assert (cpu["detect"].ai_ms, cpu["identify"].ai_ms) == (120.0, 400.0)
    assert report.cpu.application_ai_share == pytest.approx(520 / 800)
    assert report.cpu.events_without_substeps == 0


def test_fig8_counts_events_without_substeps() -> None:
    documents = synthetic_documents()
    for document in documents:
        if document["stage"] == "detect" and document["stream_id"] == "cam-2":
            del document["substeps_ms"]
    cpu = build_report(RUN, documents).cpu
    assert cpu.events_without_substeps == 3
    (detect,) = [p for p in cpu.processes if p.kind == "detect"]
    assert (detect.events, detect.total_ms["pnet"]) == (3, 30.0)


def test_fig9_amdahl_projections(report: Report) -> None:
    assert amdahl_speedup(0.5, 4) == pytest.approx(1.6)
    # The paper's detection points follow from its 57.6% non-AI (the "42%" AI is rounded).
    assert (amdahl_speedup(0.424, 8), amdahl_speedup(0.424, 16)) == pytest.approx((1.59, 1.66), abs=0.005)
    projections = {p.kind: p for p in report.amdahl}
    assert projections["ingest"].speedups == [1.0] * 6
    assert projections["ingest"].asymptote == 1.0
    assert projections["detect"].factors == [1, 2, 4, 8, 16, 32]
    assert projections["detect"].speedups == pytest.approx([1, 4 / 3, 1.6, 16 / 9, 32 / 17, 64 / 33])
    assert projections["detect"].asymptote == pytest.approx(2.0)
    assert projections["identify"].speedups == pytest.approx([1, 5 / 3, 2.5, 10 / 3, 4, 40 / 9])
    assert projections["identify"].asymptote == pytest.approx(5.0)


def test_throughput_per_stream_and_total(report: Report) -> None:
    flow = report.throughput
    assert flow.span_s == pytest.approx(2.2)
    counts = {s.stream_id: (s.frames, s.faces) for s in [*flow.streams, flow.total]}
    assert counts == {"cam-1": (3, 3), "cam-2": (3, 2), "all": (6, 5)}
    for stream in [*flow.streams, flow.total]:
        assert (stream.frames_per_s, stream.faces_per_s) == pytest.approx((stream.frames / 2.2, stream.faces / 2.2))


def test_counts_and_run_facts(report: Report) -> None:
    assert report.events == {"ingest": 6, "detect": 6, "broker_wait": 5, "identify": 5}
    assert (report.faces_detected, report.faces_identified, report.faces_unmatched) == (6, 5, 0)
    assert (report.ignored_events, report.duplicate_events, report.malformed_lines) == (1, 0, 0)
    assert (report.acceleration_factors, report.kafka_clients) == ([1.0], ["confluent-kafka"])
    assert report.paper.mean_ms["broker_wait"] == 126.1
    assert report.paper.amdahl_asymptote == {"detect": 1.74, "identify": 8.0}


def test_duplicates_are_dropped_and_unmatched_faces_left_out_of_the_breakdown(report: Report) -> None:
    documents = synthetic_documents()
    redelivered = next(d for d in documents if d["stage"] == "identify")
    late = dict(redelivered, wall_start_ns=redelivered["wall_start_ns"] + 1, wall_end_ns=at(3000))
    without_ingest = [d for d in documents if not (d["stage"] == "ingest" and d["stream_id"] == "cam-2"
                                                   and d["frame_index"] == 1)]
    duplicated = build_report(RUN, [*documents, late])
    assert duplicated.duplicate_events == 1
    assert duplicated.latency == report.latency  # the first identification counts
    unmatched = build_report(RUN, without_ingest)
    assert (unmatched.faces_identified, unmatched.faces_unmatched, unmatched.latency.faces) == (5, 1, 4)
    assert unmatched.latency.e2e.mean_ms == pytest.approx((200 + 400 + 200 + 1300) / 4)


def test_the_report_does_not_depend_on_event_order(report: Report) -> None:
    assert build_report(RUN, reversed(synthetic_documents())) == report


def test_json_round_trips(report: Report) -> None:
    text = report.to_json()
    assert json.loads(text)["latency"]["e2e"]["mean_ms"] == 520.0
    assert Report.from_json(text) == report
    assert Report.from_json(text).paper == PAPER


def test_jsonl_skips_and_counts_malformed_lines(tmp_path: Path, report: Report) -> None:
    folder = write_jsonl(tmp_path / "run", synthetic_documents())
    other_run = synthetic_documents(run_id="earlier")[0]
    with open(folder / "identify.jsonl", "a") as file:
        file.write("not json\n")
        file.write('{"run_id": "synthetic", "stage": "ingest"}\n')  # not an event: fields missing
        file.write("[1, 2]\n")
        file.write("\n")  # blank: not counted
        file.write(json.dumps(other_run) + "\n")  # another run's event: skipped, not malformed
        file.write(json.dumps(synthetic_documents()[0])[:40])  # the last line of a killed process
    loaded = load_events(RUN, folder)
    assert loaded.malformed_lines == 4
    assert len(loaded.documents) == len(synthetic_documents())
    assert [d["wall_start_ns"] for d in loaded.documents] == sorted(d["wall_start_ns"] for d in loaded.documents)
    assert build_report(RUN, loaded.documents, loaded.malformed_lines) == replace(report, malformed_lines=4)
    assert load_events(RUN, folder / "ingest-detect.jsonl").malformed_lines == 0  # one file also works


def test_unknown_run_is_a_one_line_user_error(tmp_path: Path) -> None:
    folder = write_jsonl(tmp_path / "run", synthetic_documents())
    with pytest.raises(UserError, match=rf"^run 'nope': no events in {re.escape(str(folder))}$"):
        load_events("nope", folder)
    with pytest.raises(UserError, match="no such file or folder"):
        load_events(RUN, tmp_path / "missing")


def test_terminal_table(report: Report) -> None:
    text = format_text(report)
    print(text)  # shown with -s: the report of the synthetic run
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:14]}
    assert rows["broker_wait"][1:6] == ["312.0", "210.0", "988.8", "60.0%", "1,020.0"]
    assert rows["broker_wait"][-2:] == ["126.1", "116.0"]
    assert rows["end"][3:8] == ["520.0", "400.0", "1,268.0", "100.0%", "1,300.0"]
    assert "one clock" in text
    assert "Fig. 9 detect: 1x: 1.00x, 2x: 1.33x, 4x: 1.60x" in text


def test_html_is_self_contained(report: Report) -> None:
    figures = render_figures(report)
    assert list(figures) == ["fig6", "fig7", "fig8", "fig9"]
    assert all(png.startswith(b"\x89PNG") for png in figures.values())
    page = render_html(report, figures)
    assert page.count('<img alt="') == 4
    assert page.count('src="data:image/png;base64,') == 4
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", page)
    assert "<script" not in page and "<link" not in page
    assert "<td>broker_wait</td><td>312.0</td>" in page


def test_cli_writes_json_html_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str], report: Report) -> None:
    folder = write_jsonl(tmp_path / "run", synthetic_documents())
    out = tmp_path / "out"
    assert main(["report", "--run", RUN, "--events", str(folder), "--json", str(out / "r.json"),
                 "--html", str(out / "r.html"), "--plots", str(out / "plots")]) == 0
    assert "broker_wait" in capsys.readouterr().out
    assert Report.from_json((out / "r.json").read_text()) == report
    assert 'src="data:image/png;base64,' in (out / "r.html").read_text()
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["fig6.png", "fig7.png", "fig8.png", "fig9.png"]


def test_cli_without_a_source_or_stack_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from aitax.stack import stack

    monkeypatch.setattr(stack, "current_config", lambda: None)
    with pytest.raises(UserError, match="no --events or --es given"):
        report_command.main(["--run", RUN], standalone_mode=False)
