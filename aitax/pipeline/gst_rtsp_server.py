"""A simulated camera's RTSP server: GStreamer's gst-rtsp-server, H.264 over RTP, fed raw frames on stdin.

Run by Debian's python3 (its PyGObject and GStreamer typelibs), not the project's venv, and started by
`pipeline.camera_sim`, which decodes the video and paces the frames: this side only encodes and serves. One
shared media, as a real camera has: every client sees the same live stream, and frames arrive whether or not
anyone watches. The server sends RTCP sender reports (the stream's clock) as every RTSP camera does.

usage: python3 gst_rtsp_server.py PORT PATH WIDTH HEIGHT DECLARED_FPS [USER]
(with USER, the password is read from the environment variable AITAX_CAMERA_PASSWORD: never from argv)
"""

from __future__ import annotations

import os
import sys
import threading

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

ROLE = "viewer"


def pipeline_description(width: int, height: int, fps: int) -> str:
    # key-int-max = one second: a client that (re)connects decodes within a second, as cameras' I-frame interval
    # is usually set; zerolatency: no B-frames or lookahead, so a frame leaves as soon as it is encoded.
    # A camera's sensor never waits for its encoder or its network: frames the pipeline cannot take at once are
    # dropped, oldest first (appsrc queues without bound by default; on a loaded machine its backlog, 21 s of video,
    # left in one burst towards a reader and filled the link, after which the shared media sent nothing again).
    caps = f"video/x-raw,format=RGB,width={width},height={height},framerate={fps}/1"
    return (f"( appsrc name=frames is-live=true do-timestamp=true format=time caps={caps} "
            f"max-buffers=2 max-bytes=0 leaky-type=downstream "
            f"! videoconvert ! video/x-raw,format=I420 "
            f"! x264enc tune=zerolatency speed-preset=ultrafast key-int-max={fps} bitrate=2000 "
            f"! rtph264pay name=pay0 pt=96 config-interval=1 )")


class Feed:
    """Frames from stdin into the appsrc of every prepared media; dropped while there is none.

    Every, not the latest: a client that connects as the last one leaves (a reader back from a stalled link: its
    TEARDOWN and its new DESCRIBE arrive together) can be handed the shared media that is being unprepared while a
    new one is configured. Fed only the newest, that client's media got no frame again, nor did any later client's
    (it was the factory's cached one)."""

    def __init__(self, width: int, height: int) -> None:
        self.frame_bytes = width * height * 3
        self.appsrcs: list[Gst.Element] = []
        self.lock = threading.Lock()

    def attach(self, _factory: GstRtspServer.RTSPMediaFactory, media: GstRtspServer.RTSPMedia) -> None:
        appsrc = media.get_element().get_by_name_recurse_up("frames")
        with self.lock:
            self.appsrcs.append(appsrc)
        media.connect("unprepared", self.detach, appsrc)

    def detach(self, _media: GstRtspServer.RTSPMedia, appsrc: Gst.Element) -> None:
        with self.lock:
            self.appsrcs = [each for each in self.appsrcs if each is not appsrc]

    def run(self, loop: GLib.MainLoop) -> None:
        stdin = sys.stdin.buffer
        while True:
            data = stdin.read(self.frame_bytes)
            if len(data) < self.frame_bytes:
                break
            with self.lock:
                appsrcs = list(self.appsrcs)
            for appsrc in appsrcs:  # a buffer each: appsrc stamps its own
                appsrc.emit("push-buffer", Gst.Buffer.new_wrapped(data))
        loop.quit()  # the feeder went away: the camera is off


def main(argv: list[str]) -> int:
    if len(argv) not in (6, 7):
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    port, path, width, height, fps = argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_service(port)
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(pipeline_description(width, height, fps))
    factory.set_shared(True)
    feed = Feed(width, height)
    factory.connect("media-configure", feed.attach)
    if len(argv) == 7:
        password = os.environ.get("AITAX_CAMERA_PASSWORD", "")
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string("media.factory.role", ROLE)
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(argv[6], password), token)
        server.set_auth(auth)
        permissions = GstRtspServer.RTSPPermissions()
        permissions.add_role_from_structure(Gst.Structure.new_from_string(
            f"{ROLE}, media.factory.access=(boolean)true, media.factory.construct=(boolean)true"))
        factory.set_permissions(permissions)
    server.get_mount_points().add_factory(path, factory)
    # One line per client that starts playing: whoever drives the camera (a test, a person) sees the stream taken.
    server.connect("client-connected", lambda _server, client: client.connect(
        "play-request", lambda _client, _context: print("playing", flush=True)))
    if server.attach(None) == 0:
        print(f"camera: cannot listen on port {port}", file=sys.stderr)
        return 1
    loop = GLib.MainLoop()
    threading.Thread(target=feed.run, args=(loop,), daemon=True).start()
    print(f"serving rtsp://127.0.0.1:{port}{path}", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
