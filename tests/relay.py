"""A TCP relay between a camera and its client that can stall, corrupt and cut what passes: the network faults of
the camera tests, on real sockets. RTSP over TCP interleaves RTP as `$ channel length packet`; corruption
overwrites RTP payload bytes only, so the stream stays framed and the decoder sees damaged video."""

from __future__ import annotations

import random
import socket
import threading
import time


class Relay:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.corrupt_until = 0.0
        self.cut_next = threading.Event()
        self.packets_corrupted = 0
        self.streaming_since: float | None = None  # the first RTP packet passed to a client
        self.accepted = 0  # client connections so far
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, path: str = "/stream") -> str:
        return f"rtsp://127.0.0.1:{self.port}{path}"

    def stall(self, seconds: float, until_reconnect_s: float = 0.0) -> float:
        """Nothing passes either way for `seconds`, connections open (as over a stalled link), and on until a client
        connects anew, for at most `until_reconnect_s` in all. A reader that runs behind still reads what was on its
        way when the link stalled: only a stall that outlasts that backlog is one it can see. Returns its length."""
        started, accepted = time.monotonic(), self.accepted
        self.flowing.clear()
        time.sleep(seconds)
        while self.accepted == accepted and time.monotonic() - started < until_reconnect_s:
            time.sleep(0.05)
        self.flowing.set()
        return time.monotonic() - started

    def wait_streaming(self, seconds: float, timeout_s: float = 120) -> None:
        """Until RTP has passed to a client for `seconds`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and \
                (self.streaming_since is None or time.monotonic() - self.streaming_since < seconds):
            time.sleep(0.1)

    def corrupt(self, seconds: float) -> None:
        self.corrupt_until = time.monotonic() + seconds

    def cut(self) -> None:
        """The next packet towards the client is cut in half and its connection closed: a truncated stream."""
        self.cut_next.set()

    def close(self) -> None:
        self.listener.close()
        for connection in self._connections:
            connection.close()

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
            self.accepted += 1
            self._connections += [client, camera]
            threading.Thread(target=self._pump, args=(client, camera, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(camera, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, towards_client: bool) -> None:
        pending = b""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self.flowing.wait()
                if not towards_client:
                    sink.sendall(data)
                    continue
                pending += data
                ready, pending = _split_interleaved(pending)
                for packet in ready:
                    if self.cut_next.is_set() and packet[:1] == b"$":
                        self.cut_next.clear()
                        sink.sendall(packet[: len(packet) // 2])
                        raise ConnectionAbortedError
                    if packet[:1] == b"$" and time.monotonic() < self.corrupt_until:
                        packet = self._damage(packet)
                    if packet[:1] == b"$" and self.streaming_since is None:
                        self.streaming_since = time.monotonic()
                    sink.sendall(packet)
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
