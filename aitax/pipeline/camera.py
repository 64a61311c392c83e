"""A live camera as ingestion reads it: RTSP that drops, stalls and comes back, without ending the stream.

A camera is read by OpenCV's FFmpeg over TCP or UDP. When no frame arrives for `stall_s`, or the stream ends,
the connection is dropped and made again with capped, doubling backoff; the gap is measured. Credentials never
travel in a printed URL: `CameraSource.shown` is what errors and logs name. A camera that refuses the credentials
is a one-line error, not a retry loop. Health is counted in shared memory, which the detect process reads: a
camera that is down still reports (`pipeline.ingest_detect`).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import multiprocessing
import os
import queue
import re
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from aitax.common.errors import UserError
from aitax.pipeline.stream import BoundedQueue, Frame, hand_off
from aitax.telemetry.camera_health import CameraHealth

TRANSPORTS = ("tcp", "udp")
LIVE_SCHEMES = ("rtsp", "rtsps")
PASSWORD_ENV = "AITAX_CAMERA_PASSWORD"
PROBE_US = 500_000
STALL_SHARE = 0.95  # a read that took this share of the stall timeout waited it out
FPS_WINDOW = 50  # frames the measured rate is taken over


@dataclass(frozen=True)
class CameraSource:
    """Where a camera is and how to read it. `url` never holds credentials; the password is not in its repr."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    transport: str = "tcp"
    declared_fps: float = 0.0  # 0: take the stream's own
    stall_s: float = 5.0  # no frame for this long: reconnect
    backoff_s: float = 0.25  # first wait before reconnecting; doubles up to backoff_max_s
    backoff_max_s: float = 1.0  # a camera back from a restart is read within about this, plus half a second

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise UserError(f"camera {self.shown}: transport {self.transport!r}: expected tcp or udp")
        for name in ("stall_s", "backoff_s", "backoff_max_s"):
            if getattr(self, name) <= 0:
                raise UserError(f"camera {self.shown}: {name} {getattr(self, name)}: must be positive")
        if self.declared_fps < 0:
            raise UserError(f"camera {self.shown}: declared_fps {self.declared_fps}: must not be negative")

    @classmethod
    def parse(cls, url: str, user: str | None = None, password: str | None = None, **settings: Any) -> CameraSource:
        """Split credentials out of the URL (they may come there, from a user's copy and paste); explicit ones win.
        Without a password, the environment's AITAX_CAMERA_PASSWORD is used when a user is named."""
        parts = urlsplit(url)
        if parts.scheme not in LIVE_SCHEMES or not parts.hostname:
            raise UserError(f"camera {mask(url)}: expected rtsp://HOST[:PORT]/PATH or rtsps://")
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        user = user or (unquote(parts.username) if parts.username else None)
        password = password or (unquote(parts.password) if parts.password else None)
        if user and password is None:
            password = os.environ.get(PASSWORD_ENV)
        return cls(urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")), user, password, **settings)

    @property
    def shown(self) -> str:
        """The URL as printed: the user's name, never the password."""
        if not self.user:
            return self.url
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, f"{quote(self.user, safe='')}@{parts.netloc}", parts.path, parts.query, ""))

    def open_url(self) -> str:
        """The URL FFmpeg is given, credentials percent-encoded in it: never printed."""
        if not self.user:
            return self.url
        parts = urlsplit(self.url)
        secret = f"{quote(self.user, safe='')}:{quote(self.password or '', safe='')}@"
        return urlunsplit((parts.scheme, secret + parts.netloc, parts.path, parts.query, ""))


def is_live(source: str) -> bool:
    return urlsplit(source).scheme in LIVE_SCHEMES


def mask(text: str) -> str:
    """Any `scheme://user:password@` in the text, with the password replaced: for URLs a user typed."""
    return re.sub(r"(\w+://[^:/@\s]+):[^@/\s]*@", r"\1:***@", text)


# -- credentials: asked once, before FFmpeg (which would only say it could not open the stream) -----------------

_SEQUENCE = itertools.count(1)  # RTSP's CSeq


class CameraRefusedError(UserError):
    """The camera answered and refused the credentials: retrying would not help (and would lock accounts)."""


def check_access(source: CameraSource, timeout_s: float = 5.0) -> bool:
    """Ask the camera to DESCRIBE its stream, with the credentials (Basic or Digest, as it challenges). True when it
    answered 200; False when it could not be reached (retry later); CameraRefusedError on 401 or 403."""
    parts = urlsplit(source.url)
    port = parts.port or (322 if parts.scheme == "rtsps" else 554)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s) as plain:
            connection = (ssl.create_default_context().wrap_socket(plain, server_hostname=parts.hostname)
                          if parts.scheme == "rtsps" else plain)
            status, headers = _describe(connection, source.url, None)
            if status == 401 and source.user:
                challenge = headers.get("www-authenticate", "")
                status, headers = _describe(connection, source.url, _authorization(source, challenge))
    except (OSError, ValueError):
        return False
    if status in (401, 403):
        who = f"as {source.user!r}" if source.user else "without credentials"
        raise CameraRefusedError(f"camera {source.shown}: refused {who} (RTSP {status}); not retrying")
    return status == 200


def _describe(connection: socket.socket, url: str, authorization: str | None) -> tuple[int, dict[str, str]]:
    lines = [f"DESCRIBE {url} RTSP/1.0", f"CSeq: {next(_SEQUENCE)}", "Accept: application/sdp", "User-Agent: aitax"]
    if authorization:
        lines.append(f"Authorization: {authorization}")
    connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = connection.recv(4096)
        if not chunk:
            raise ValueError("connection closed")
        reply += chunk
    head = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), value.strip())
    return status, headers


def _authorization(source: CameraSource, challenge: str) -> str:
    user, password = source.user or "", source.password or ""
    if not challenge.lower().startswith("digest"):
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    params = dict(re.findall(r'(\w+)="?([^",]*)"?', challenge))
    realm, nonce = params.get("realm", ""), params.get("nonce", "")

    def md5(text: str) -> str:
        return hashlib.md5(text.encode()).hexdigest()  # RFC 2617's Digest is MD5 by definition

    response = md5(f"{md5(f'{user}:{realm}:{password}')}:{nonce}:{md5(f'DESCRIBE:{source.url}')}")
    return (f'Digest username="{user}", realm="{realm}", nonce="{nonce}", uri="{source.url}", '
            f'response="{response}"')


# -- health, shared between the ingest process (which counts) and the detect process (which reports) ------------

_HEALTH_FIELDS = [f.name for f in fields(CameraHealth)]


class SharedHealth:
    """A CameraHealth in shared memory: the ingest process writes, the detect process reads, even while the camera
    is down and no frame flows."""

    def __init__(self, context: Any = multiprocessing) -> None:
        self._values = context.Array("d", len(_HEALTH_FIELDS))

    def add(self, name: str, amount: float = 1) -> None:
        with self._values.get_lock():
            self._values[_HEALTH_FIELDS.index(name)] += amount

    def set(self, **values: float) -> None:
        with self._values.get_lock():
            for name, value in values.items():
                self._values[_HEALTH_FIELDS.index(name)] = value

    def snapshot(self) -> CameraHealth:
        with self._values.get_lock():
            values = list(self._values)
        kinds = {f.name: type(f.default) for f in fields(CameraHealth)}
        return CameraHealth(**{name: kinds[name](value) for name, value in zip(_HEALTH_FIELDS, values, strict=True)})


class NewestFrame:
    """A live camera's hand-over to detection, which never makes the camera wait: a frame that finds the queue
    full waits in one slot, and a newer frame takes the slot over, the one it replaces counted as dropped. So the
    newest frame gets through once there is room, and a dropped frame never crosses to the detect process (taking
    frames back off a process queue cost a core in busy retries while detection was behind)."""

    def __init__(self, frames: BoundedQueue, health: SharedHealth) -> None:
        self.frames = frames
        self.health = health
        self.waiting: Frame | None = None

    def offer(self, frame: Frame) -> None:
        self.flush()
        if self.waiting is not None:
            self.health.add("dropped")
        self.waiting = frame
        self.flush()

    def flush(self) -> None:
        if self.waiting is None:
            return
        try:
            self.frames.put(self.waiting, block=False)
            self.waiting = None
        except queue.Full:
            pass

    def finish(self, stopping: Callable[[], bool]) -> None:
        """The frame still waiting goes to detection once there is room, or is counted as dropped at a stop."""
        if self.waiting is not None and not hand_off(self.frames, self.waiting, stopping):
            self.health.add("dropped")
        self.waiting = None


# -- reading -------------------------------------------------------------------------------------------------

class StreamClock:
    """Capture times from the stream's timestamps, anchored to the least delayed arrival of this connection: a
    frame's capture time is never after its arrival, and delay added on the way shows as lateness."""

    def __init__(self) -> None:
        self.offset_ns: int | None = None

    def capture_ns(self, stream_ms: float, arrival_ns: int) -> int:
        offset = arrival_ns - int(stream_ms * 1e6)
        self.offset_ns = offset if self.offset_ns is None else min(self.offset_ns, offset)
        return self.offset_ns + int(stream_ms * 1e6)


def _open(source: CameraSource) -> Any:
    import cv2

    # FFmpeg's options for this process's captures (one camera per ingest process, as the paper deploys them):
    # half a second of probing, not FFmpeg's default 5 s, so a camera back from a restart delivers at once.
    os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = \
        f"rtsp_transport;{source.transport}|analyzeduration;{PROBE_US}|fflags;nobuffer"
    timeout_ms = int(source.stall_s * 1000)
    capture = cv2.VideoCapture(source.open_url(), cv2.CAP_FFMPEG,
                               [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, max(timeout_ms, 5000),
                                cv2.CAP_PROP_READ_TIMEOUT_MSEC, timeout_ms])
    if not capture.isOpened():
        capture.release()
        return None
    return capture


def camera_frames(source: CameraSource, stream_id: str, size: tuple[int, int], health: SharedHealth,
                  stopping: Callable[[], bool], max_frames: int | None = None,
                  log: Callable[[str], None] = print) -> Iterator[Frame]:
    """Frames of a live camera until `stopping()` (or `max_frames`), through any number of outages. Raises
    CameraRefusedError, once, when the camera refuses the credentials."""
    import cv2

    from aitax.pipeline.frames import to_frame

    index, backoff, last_arrival, outage_since, longest_gap = 0, source.backoff_s, None, None, 0.0
    # the rate over the last frames: by the stream's clock (s), or by arrival without one
    stream_times: deque[float] = deque(maxlen=FPS_WINDOW)
    arrivals: deque[float] = deque(maxlen=FPS_WINDOW)
    while not stopping() and (max_frames is None or index < max_frames):
        capture = _open(source) if check_access(source) else None
        if capture is not None:
            clock, first = StreamClock(), True
            stream_times.clear()  # the measured rate is the camera's while connected, not diluted by an outage
            arrivals.clear()
            declared = source.declared_fps or _stream_fps(capture)
            try:
                while not stopping() and (max_frames is None or index < max_frames):
                    started = time.perf_counter()
                    ok, bgr = capture.read()
                    arrival_ns, now = time.time_ns(), time.monotonic()
                    # FFmpeg's read timeout ends a stall by handing over the frames its decoder still held, one per
                    # timeout: the first read that waited out the timeout ends this connection.
                    stalled = time.perf_counter() - started >= STALL_SHARE * source.stall_s
                    if not ok:
                        break  # stalled past stall_s, or the stream ended: reconnect
                    health.add("received")
                    if first:
                        health.add("connects")
                        if last_arrival is not None:
                            health.add("reconnects")
                            gap = now - last_arrival
                            health.add("gaps_s", gap)
                            log(f"camera {stream_id} ({source.shown}): frames again after {gap:.1f} s")
                        health.set(connected=1, declared_fps=declared)
                        first, backoff, outage_since = False, source.backoff_s, None
                    if stalled:  # the frame came before the stall: the gap runs on from the one before it
                        now = last_arrival if last_arrival is not None else now
                    elif last_arrival is not None and now - last_arrival > longest_gap:
                        longest_gap = now - last_arrival
                        health.set(longest_gap_s=longest_gap)
                    last_arrival = now
                    stream_ms = capture.get(cv2.CAP_PROP_POS_MSEC)
                    _measure_rate(health, stream_times, arrivals, stream_ms, now)
                    if bgr is None or bgr.size == 0:
                        health.add("undecodable")
                        if stalled:
                            break
                        continue
                    health.add("decoded")
                    captured_ns = clock.capture_ns(stream_ms, arrival_ns) if stream_ms > 0 else arrival_ns
                    health.set(stream_clock=1 if stream_ms > 0 else 0)
                    yield to_frame(bgr, stream_id, index, size, captured_ns, captured_ns, started)
                    index += 1
                    if stalled:
                        break
            finally:
                capture.release()
            if stopping() or index == max_frames:  # left, not lost: a camera read to the end stays connected
                break
            health.set(connected=0)
            if not first:
                log(f"camera {stream_id} ({source.shown}): no frame for {source.stall_s:g} s or the stream ended; "
                    f"reconnecting")
                continue
        # Unreachable, or connected and not one frame came: a failed attempt, retried after the backoff.
        health.add("failed_connects")
        health.set(connected=0)
        if outage_since is None:
            outage_since = time.monotonic()
            why = "unreachable" if capture is None else f"connected, but no frame in {source.stall_s:g} s"
            log(f"camera {stream_id} ({source.shown}): {why}; retrying every {backoff:g}-{source.backoff_max_s:g} s")
        _sleep_unless(stopping, backoff)
        backoff = min(backoff * 2, source.backoff_max_s)


def _measure_rate(health: SharedHealth, stream_times: deque[float], arrivals: deque[float], stream_ms: float,
                  arrived_s: float) -> None:
    """The camera's rate over its last frames, by its own clock where it has one: a reader that fell behind and
    catches up reads a burst, which is not the camera's rate."""
    arrivals.append(arrived_s)
    if stream_ms > 0:
        stream_times.append(stream_ms / 1000)
    stamps = stream_times if len(stream_times) > 1 else arrivals
    if len(stamps) > 1:
        health.set(measured_fps=(len(stamps) - 1) / max(1e-9, stamps[-1] - stamps[0]))


def _stream_fps(capture: Any) -> float:
    import cv2

    fps = capture.get(cv2.CAP_PROP_FPS)
    return fps if fps and 1 <= fps <= 240 else 0.0


def _sleep_unless(stopping: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not stopping() and time.monotonic() < deadline:
        time.sleep(min(0.1, deadline - time.monotonic()))
