"""Simulated cameras: videos served as live H.264 over RTSP, for tests, demos and a user's own trials.

A camera here is two parts: this process decodes the video with OpenCV, loops it and paces it at the camera's
real rate; GStreamer's RTSP server (`pipeline.gst_rtsp_server`, under Debian's python3) encodes and serves it.
Frames are made whether or not anyone watches, as by a real camera. A camera can run slower than it declares,
be switched off and on (a restart), or freeze (its process stopped: no bytes, its connections open).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from aitax.common.errors import UserError

DEBIAN_PYTHON = "/usr/bin/python3"  # the interpreter Debian's PyGObject and GStreamer typelibs belong to
SERVER = Path(__file__).with_name("gst_rtsp_server.py")
SETUP_HINT = "make setup-camera (Debian's gstreamer1.0 RTSP server, x264 and python3-gi)"


@dataclass(frozen=True)
class CameraSpec:
    """What a simulated camera serves and how."""

    video: Path
    port: int
    path: str = "/stream"
    fps: float = 10.0  # the rate frames really leave at
    declared_fps: int | None = None  # the rate its stream declares (default: fps); lower fps: a slow camera
    size: tuple[int, int] = (960, 540)
    user: str | None = None
    password: str | None = None

    @property
    def url(self) -> str:
        return f"rtsp://127.0.0.1:{self.port}{self.path}"


class SimulatedCamera:
    def __init__(self, spec: CameraSpec) -> None:
        if not spec.video.is_file():
            raise UserError(f"camera video {spec.video}: no such file")
        if spec.fps <= 0:
            raise UserError(f"camera {spec.url}: fps {spec.fps}: must be positive")
        self.spec = spec
        self.frames_sent = 0
        self.plays = 0  # clients that started playing the stream
        self.playing = threading.Event()  # set by the first
        self._server: subprocess.Popen | None = None
        self._feeder: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        return self.spec.url

    def start(self, timeout_s: float = 15.0) -> SimulatedCamera:
        width, height = self.spec.size
        declared = self.spec.declared_fps or round(self.spec.fps)
        command = [DEBIAN_PYTHON, str(SERVER), str(self.spec.port), self.spec.path, str(width), str(height),
                   str(declared), *([self.spec.user] if self.spec.user else [])]
        environment = {**os.environ, "AITAX_CAMERA_PASSWORD": self.spec.password or ""}
        try:
            server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=environment, start_new_session=True)
        except FileNotFoundError:
            raise UserError(f"camera: {DEBIAN_PYTHON} not found; run {SETUP_HINT}") from None
        deadline = time.monotonic() + timeout_s
        line = b""
        while time.monotonic() < deadline and server.poll() is None and not line:
            line = server.stdout.readline()
        if not line.startswith(b"serving"):
            server.kill()
            error = server.stderr.read().decode(errors="replace").strip().splitlines()
            detail = error[-1] if error else "no answer"
            hint = f"; run {SETUP_HINT}" if "gi" in detail or "Namespace" in detail or "GStreamer" in detail else ""
            raise UserError(f"camera {self.url}: the RTSP server did not start ({detail}){hint}")
        self._server = server
        self._stop.clear()
        threading.Thread(target=self._count_plays, args=(server,), daemon=True).start()
        self._feeder = threading.Thread(target=self._feed, args=(server,), name=f"camera-{self.spec.port}",
                                        daemon=True)
        self._feeder.start()
        return self

    def _count_plays(self, server: subprocess.Popen) -> None:
        for line in server.stdout:
            if line.startswith(b"playing"):
                self.plays += 1
                self.playing.set()

    def _feed(self, server: subprocess.Popen) -> None:
        import cv2

        width, height = self.spec.size
        period = 1.0 / self.spec.fps
        capture = cv2.VideoCapture(str(self.spec.video))
        due = time.monotonic()
        try:
            while not self._stop.is_set():
                ok, bgr = capture.read()
                if not ok:  # loop: a camera never ends
                    capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
                    ok, bgr = capture.read()
                    if not ok:
                        return
                rgb = cv2.cvtColor(cv2.resize(bgr, (width, height), interpolation=cv2.INTER_AREA),
                                   cv2.COLOR_BGR2RGB)
                due += period
                delay = due - time.monotonic()
                if delay > 0:
                    self._stop.wait(delay)
                else:
                    due = time.monotonic()  # fell behind (frozen, or a busy machine): no burst to catch up
                try:
                    server.stdin.write(rgb.tobytes())
                    server.stdin.flush()
                except (BrokenPipeError, ValueError, OSError):
                    return
                self.frames_sent += 1
        finally:
            capture.release()

    def stop(self) -> None:
        """Switch the camera off: its server goes, every connection with it."""
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
            for pipe in (server.stdin, server.stdout, server.stderr):
                with contextlib.suppress(OSError):  # a pipe the feeder was writing to when the server died
                    pipe.close()
        if self._feeder is not None:
            self._feeder.join(5)

    def freeze(self) -> None:
        """The camera stops sending without closing anything (its process stopped), as over a stalled network."""
        if self._server is not None:
            os.killpg(self._server.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self._server is not None:
            os.killpg(self._server.pid, signal.SIGCONT)

    def __enter__(self) -> SimulatedCamera:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
