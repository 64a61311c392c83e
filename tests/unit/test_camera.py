"""A live camera's edges without a camera: its URL and credentials, the credential check against a scripted RTSP
peer on a real socket, the stream clock, the drop policy, the shared health, and how health reaches events,
metrics and the report. The real camera is in tests/integration/test_cameras.py."""

from __future__ import annotations

import queue
import socket
import threading

import pytest
from prometheus_client import generate_latest

from aitax.common.errors import UserError
from aitax.pipeline.camera import (
    CameraRefusedError,
    CameraSource,
    NewestFrame,
    SharedHealth,
    StreamClock,
    check_access,
)
from aitax.pipeline.stream import Frame
from aitax.reporting.report import build_report
from aitax.reporting.report_render import camera_line
from aitax.runs.results import Camera, Workload
from aitax.telemetry.camera_health import CameraHealth
from aitax.telemetry.events import INDEX_MAPPING, Event
from aitax.telemetry.metrics import StageMetrics


def test_credentials_leave_the_url_and_only_the_user_is_ever_shown() -> None:
    source = CameraSource.parse("rtsp://ops:p%40ss:w0rd@cam.example:8554/live?x=1")
    assert source.url == "rtsp://cam.example:8554/live?x=1"
    assert (source.user, source.password) == ("ops", "p@ss:w0rd")
    assert source.shown == "rtsp://ops@cam.example:8554/live?x=1"
    assert source.open_url() == "rtsp://ops:p%40ss%3Aw0rd@cam.example:8554/live?x=1"
    assert "w0rd" not in repr(source) and "w0rd" not in source.shown


def test_the_password_comes_from_the_environment_when_only_a_user_is_named(monkeypatch) -> None:
    monkeypatch.setenv("AITAX_CAMERA_PASSWORD", "from-env")
    assert CameraSource.parse("rtsp://cam/x", user="ops").password == "from-env"
    assert CameraSource.parse("rtsp://cam/x").password is None  # no user: no credentials at all


@pytest.mark.parametrize(("url", "settings", "message"), [
    ("http://cam/x", {}, "expected rtsp://"),
    ("rtsp://ops:secret@cam/x", {"transport": "quic"}, "transport 'quic': expected tcp or udp"),
    ("rtsp://cam/x", {"stall_s": 0}, "stall_s 0: must be positive"),
])
def test_bad_camera_settings_are_one_line_naming_the_value_and_never_the_password(url, settings, message) -> None:
    with pytest.raises(UserError, match=message) as raised:
        CameraSource.parse(url, **settings)
    assert "secret" not in str(raised.value) and "\n" not in str(raised.value)


def test_a_results_file_never_holds_a_cameras_password() -> None:
    with pytest.raises(ValueError, match="holds a password"):
        Camera(url="rtsp://ops:secret@cam/x")
    camera = Camera(url="rtsp://cam/x", user="ops", password_file="/run/secrets/camera")
    assert camera.arguments()[:2] == ["--video", "rtsp://cam/x"]
    assert "--camera-password-file" in camera.arguments()
    with pytest.raises(ValueError, match="one producer per camera"):
        Workload(mode="real", producers=2, consumers=1, duration_s=5, cameras=[camera])


def test_a_workloads_camera_reads_its_password_from_its_file(tmp_path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    source = Camera(url="rtsp://cam/x", user="ops", password_file=str(secret), transport="udp").source()
    assert (source.user, source.password, source.transport) == ("ops", "s3cret", "udp")
    with pytest.raises(UserError, match=r"^camera rtsp://cam/x: password_file .*/nothing: No such file"):
        Camera(url="rtsp://cam/x", user="ops", password_file=str(tmp_path / "nothing")).source()


class ScriptedCamera:
    """An RTSP peer on a real socket that answers DESCRIBE as `answer(request)` says."""

    def __init__(self, answer) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[str] = []
        self.answer = answer
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                buffer = b""
                while True:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    buffer += chunk
                    while b"\r\n\r\n" in buffer:
                        request, buffer = buffer.split(b"\r\n\r\n", 1)
                        text = request.decode()
                        self.requests.append(text)
                        cseq = next(line for line in text.split("\r\n") if line.startswith("CSeq"))
                        status, headers = self.answer(text)
                        connection.sendall(f"RTSP/1.0 {status}\r\n{cseq}\r\n{headers}\r\n".encode())

    def close(self) -> None:
        self.listener.close()


def basic_only(text: str) -> tuple[str, str]:
    if "Authorization: Basic b3BzOnJpZ2h0" in text:  # ops:right
        return "200 OK", "Content-Length: 0\r\n"
    return "401 Unauthorized", 'WWW-Authenticate: Basic realm="cam"\r\n'


def test_refused_credentials_are_one_line_and_asked_once() -> None:
    peer = ScriptedCamera(basic_only)
    try:
        url = f"rtsp://127.0.0.1:{peer.port}/stream"
        with pytest.raises(CameraRefusedError) as refused:
            check_access(CameraSource.parse(url, user="ops", password="wrong"))
        assert str(refused.value) == (f"camera rtsp://ops@127.0.0.1:{peer.port}/stream: refused as 'ops' (RTSP 401); "
                                      "not retrying")
        assert len(peer.requests) == 2  # without, then with the credentials: no loop
        assert check_access(CameraSource.parse(url, user="ops", password="right")) is True
    finally:
        peer.close()


def test_digest_credentials_are_answered_as_rfc_2617_says() -> None:
    import hashlib

    def digest(text: str) -> tuple[str, str]:
        def md5(value: str) -> str:
            return hashlib.md5(value.encode()).hexdigest()

        expected = md5(f"{md5('ops:cam:right')}:n0nce:{md5('DESCRIBE:rtsp://127.0.0.1:' + str(peer.port) + '/s')}")
        if f'response="{expected}"' in text:
            return "200 OK", ""
        return "401 Unauthorized", 'WWW-Authenticate: Digest realm="cam", nonce="n0nce"\r\n'

    peer = ScriptedCamera(digest)
    try:
        assert check_access(CameraSource.parse(f"rtsp://127.0.0.1:{peer.port}/s", user="ops", password="right"))
        with pytest.raises(CameraRefusedError):
            check_access(CameraSource.parse(f"rtsp://127.0.0.1:{peer.port}/s", user="ops", password="nope"))
    finally:
        peer.close()


def test_an_unreachable_camera_is_waited_for_not_an_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens
    assert check_access(CameraSource.parse(f"rtsp://127.0.0.1:{port}/s"), timeout_s=1) is False


def test_the_stream_clock_never_puts_capture_after_arrival_and_keeps_the_least_delay() -> None:
    clock = StreamClock()
    ms = 1_000_000
    assert clock.capture_ns(0.0, 1000 * ms) == 1000 * ms
    assert clock.capture_ns(100.0, 1150 * ms) == 1100 * ms  # 50 ms late on the way: shown as lateness
    assert clock.capture_ns(200.0, 1190 * ms) == 1190 * ms  # less delayed than the first: the anchor moves
    assert clock.capture_ns(300.0, 1400 * ms) == 1290 * ms


def frame(index: int) -> Frame:
    import numpy as np

    return Frame("cam-1", index, np.zeros((2, 2, 3), np.uint8), 0, 0, 0.0, 0.0, 0)


def test_a_full_queue_keeps_the_newest_frame_waiting_and_counts_each_one_it_replaces() -> None:
    frames: queue.Queue = queue.Queue(maxsize=2)
    health = SharedHealth()
    newest = NewestFrame(frames, health)
    for index in range(5):
        newest.offer(frame(index))
    assert [frames.get_nowait().index for _ in range(2)] == [0, 1] and newest.waiting.index == 4
    assert health.snapshot().dropped == 2  # 2 and 3, each replaced by a newer frame before there was room
    newest.offer(frame(5))  # room now: 4 goes on, 5 follows it
    assert [frames.get_nowait().index for _ in range(2)] == [4, 5] and health.snapshot().dropped == 2
    newest.offer(frame(6))
    newest.finish(lambda: False)  # handed over at the end, not lost
    assert frames.get_nowait().index == 6 and newest.waiting is None and health.snapshot().dropped == 2


class ScriptedCapture:
    """A connection FFmpeg opened, reading `frames` images and then nothing (a read that timed out)."""

    def __init__(self, frames: int) -> None:
        self.left = frames

    def read(self) -> tuple[bool, object]:
        import numpy as np

        self.left -= 1
        return (True, np.zeros((4, 4, 3), np.uint8)) if self.left >= 0 else (False, None)

    def get(self, _prop: int) -> float:
        return 0.0

    def release(self) -> None:
        pass


def test_a_connection_that_opens_but_brings_no_frame_is_a_failed_attempt(monkeypatch) -> None:
    import aitax.pipeline.camera as camera

    connections = iter([ScriptedCapture(2), ScriptedCapture(0), ScriptedCapture(0), ScriptedCapture(3)])
    monkeypatch.setattr(camera, "check_access", lambda _source: True)
    monkeypatch.setattr(camera, "_open", lambda _source: next(connections))
    health, lines = SharedHealth(), []
    source = CameraSource.parse("rtsp://127.0.0.1:1/s", backoff_s=0.01, backoff_max_s=0.01)
    frames = list(camera.camera_frames(source, "cam-1", (4, 4), health, lambda: False, max_frames=5,
                                       log=lines.append))
    seen = health.snapshot()
    assert [f.index for f in frames] == [0, 1, 2, 3, 4]
    assert (seen.connects, seen.reconnects, seen.failed_connects, seen.connected) == (2, 1, 2, True)
    assert sum("connected, but no frame" in line for line in lines) == 1  # once per outage, not per attempt


def test_shared_health_keeps_its_types_across_processes_writes() -> None:
    health = SharedHealth()
    health.add("received", 3)
    health.add("gaps_s", 1.5)
    health.set(connected=1, measured_fps=9.5)
    snapshot = health.snapshot()
    assert snapshot.received == 3 and isinstance(snapshot.received, int)
    assert snapshot.connected is True and snapshot.gaps_s == 1.5 and snapshot.capture_clock == "arrival"


def camera_event(stream_id: str, start_s: int, **health) -> Event:
    return Event(run_id="r", stage="camera", stream_id=stream_id, frame_index=0, wall_start_ns=start_s * 10**9,
                 wall_end_ns=(start_s + 1) * 10**9, compute_time_ms=0.0, camera=CameraHealth(**health).to_document())


def test_health_reaches_the_report_from_each_cameras_last_event() -> None:
    last = dict(received=20, detected=15, dropped=5, reconnects=1, connected=True, measured_fps=6.0,
                declared_fps=10.0)
    events = [camera_event("cam-1", 1, received=10, detected=8), camera_event("cam-1", 2, **last),
              camera_event("cam-2", 1, received=4, detected=4, connected=True)]
    report = build_report("r", [event.to_document() for event in events])
    assert [(c.stream_id, c.health.received) for c in report.cameras] == [("cam-1", 20), ("cam-2", 4)]
    line = camera_line("cam-1", report.cameras[0].health)
    assert "20 frames received" in line and "5 dropped" in line and "0 queued" in line
    assert "1 reconnects" in line and "slower than declared" in line
    assert report.ignored_events == 0


def test_health_events_fit_the_strict_mapping_and_feed_prometheus() -> None:
    mapping = INDEX_MAPPING["properties"]["camera"]["properties"]
    document = camera_event("cam-1", 1, received=10).to_document()
    assert set(document["camera"]) == set(mapping)
    metrics = StageMetrics("ingest-detect")
    metrics.observe(camera_event("cam-3", 1, received=10, reconnects=1, longest_gap_s=2.5))
    metrics.observe(camera_event("cam-3", 2, received=25, reconnects=1, longest_gap_s=2.5))
    text = generate_latest(metrics.registry).decode()
    assert 'aitax_camera_frames_total{outcome="received",stream="cam-3"} 25.0' in text
    assert 'aitax_camera_connections_total{outcome="reconnects",stream="cam-3"} 1.0' in text
    assert 'aitax_camera_longest_gap_seconds{stream="cam-3"} 2.5' in text
