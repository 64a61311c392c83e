"""A TCP relay between a camera and its client that can stall, corrupt and cut what passes: the network faults of
the camera tests, on real sockets. RTSP over TCP interleaves RTP as `$ channel length packet`; corruption
overwrites RTP payload bytes only, so the stream stays framed and the decoder sees damaged video."""

from __future__ import annotations

import random
import socket
import threading
import time
from dataclasses import dataclass


@dataclass
class Connection:
    """One client connection through the relay, by the monotonic clock."""

    accepted: float
    first_rtp: float | None = None  # RTP passed towards the client: first and latest
    last_rtp: float | None = None

    def streamed_s(self) -> float:
        return 0.0 if self.first_rtp is None or self.last_rtp is None else self.last_rtp - self.first_rtp


class Relay:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.corrupt_until = 0.0
        self.cut_next = threading.Event()
        self.cut_at: float | None = None  # when a packet was cut
        self.packets_corrupted = 0
        self.connections: list[Connection] = []  # every client connection so far, oldest first
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, path: str = "/stream") -> str:
        return f"rtsp://127.0.0.1:{self.port}{path}"

    def stall(self, seconds: float, until_reconnect_s: float = 0.0) -> float:
        """Nothing passes either way for `seconds`, connections open (as over a stalled link), and on until a client
        connects anew, for at most `until_reconnect_s` in all. A reader that runs behind still reads what was on its
        way when the link stalled: only a stall that outlasts that backlog is one it can see. Returns its length."""
        started, accepted = time.monotonic(), len(self.connections)
        self.flowing.clear()
        time.sleep(seconds)
        while len(self.connections) == accepted and time.monotonic() - started < until_reconnect_s:
            time.sleep(0.05)
        self.flowing.set()
        return time.monotonic() - started

    def streamed(self, seconds: float, since: float = 0.0) -> bool:
        """Whether a connection accepted at `since` or later has passed RTP to its client for `seconds`."""
        return any(c.accepted >= since and c.streamed_s() >= seconds for c in self.connections)

    def wait_streaming(self, seconds: float, timeout_s: float = 120) -> None:
        """Until RTP has passed to a client for `seconds`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.streamed(seconds):
            time.sleep(0.1)

    def timeline(self, since: float) -> str:
        """Each connection's times from `since`: for a failure message."""
        def at(moment: float | None) -> str:
            return "-" if moment is None else f"{moment - since:+.1f}s"

        return "; ".join(f"accepted {at(c.accepted)}, RTP {at(c.first_rtp)}..{at(c.last_rtp)}"
                         for c in self.connections)

    def corrupt(self, seconds: float) -> None:
        self.corrupt_until = time.monotonic() + seconds

    def cut(self) -> None:
        """The next packet towards the client is cut in half and its connection closed: a truncated stream."""
        self.cut_next.set()

    def close(self) -> None:
        self.listener.close()
        for each in self._sockets:
            each.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                camera = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            camera.settimeout(None)
            connection = Connection(time.monotonic())
            self.connections.append(connection)
            self._sockets += [client, camera]
            threading.Thread(target=self._pump, args=(client, camera, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(camera, client, connection), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, towards_client: Connection | None) -> None:
        pending = b""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self.flowing.wait()
                if towards_client is None:
                    sink.sendall(data)
                    continue
                pending += data
                ready, pending = _split_interleaved(pending)
                for packet in ready:
                    if self.cut_next.is_set() and packet[:1] == b"$":
                        self.cut_next.clear()
                        self.cut_at = time.monotonic()
                        sink.sendall(packet[: len(packet) // 2])
                        raise ConnectionAbortedError
                    if packet[:1] == b"$" and time.monotonic() < self.corrupt_until:
                        packet = self._damage(packet)
                    sink.sendall(packet)
                    if packet[:1] == b"$":
                        towards_client.last_rtp = time.monotonic()
                        if towards_client.first_rtp is None:
                            towards_client.first_rtp = towards_client.last_rtp
        except OSError:
            pass
        finally:
            for end in (source, sink):
                end.close()

    def _damage(self, packet: bytes) -> bytes:
        header = 4 + 12 + 2  # interleaved header, RTP header, H.264 payload header bytes left intact
        if len(packet) <= header + 8 or packet[1] % 2:  # odd channels carry RTCP
            return packet
        self.packets_corrupted += 1
        body = bytearray(packet)
        for _ in range(8):
            body[random.randrange(header, len(body))] = random.randrange(256)
        return bytes(body)


def _split_interleaved(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Whole interleaved packets and RTSP messages off the front of `buffer`, and what is left incomplete."""
    out = []
    while buffer:
        if buffer[:1] == b"$":
            if len(buffer) < 4:
                break
            size = 4 + int.from_bytes(buffer[2:4], "big")
            if len(buffer) < size:
                break
            out.append(buffer[:size])
            buffer = buffer[size:]
        else:  # an RTSP reply: up to its blank line, plus its body
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buffer[: end + 4]
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if len(buffer) < end + 4 + length:
                break
            out.append(buffer[: end + 4 + length])
            buffer = buffer[end + 4 + length:]
    return out, buffer
