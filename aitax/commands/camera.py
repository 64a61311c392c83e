"""Simulated cameras: `aitax camera serve` serves videos as live RTSP streams, one camera per video."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from aitax.commands.options import SIZE
from aitax.common.errors import UserError


def register(root: click.Group) -> None:
    root.add_command(camera)


@click.group(short_help="simulated cameras: videos served as live RTSP (H.264)")
def camera() -> None:
    """Cameras the project runs, for trials and tests: each video becomes a live camera that loops it."""


@camera.command(short_help="serve videos as live RTSP cameras until Ctrl-C",
                help="Serves each VIDEO as its own camera, rtsp://127.0.0.1:PORT/stream with PORT counting up from "
                     "--port: H.264 over RTP by GStreamer's RTSP server, looped, at --fps. With --user, clients must "
                     "log in; the password comes from $AITAX_CAMERA_PASSWORD, never the command line.")
@click.argument("videos", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--port", type=click.IntRange(1, 65535), default=8554, show_default=True, help="the first camera's")
@click.option("--fps", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="the rate frames really leave at")
@click.option("--declared-fps", type=click.IntRange(min=1),
              help="the rate the stream declares (default: --fps); above --fps: a camera slower than it says")
@click.option("--size", type=SIZE, default="960x540", show_default=True, metavar="WIDTHxHEIGHT",
              help="frame size served")
@click.option("--user", help="require this RTSP user (Basic); password from $AITAX_CAMERA_PASSWORD")
@click.option("--seconds", type=click.FloatRange(min=0), help="stop after this long (default: until Ctrl-C)")
def serve(videos: tuple[Path, ...], port: int, fps: float, declared_fps: int | None, size: tuple[int, int],
          user: str | None, seconds: float | None) -> int:
    from aitax.pipeline.camera_sim import CameraSpec, SimulatedCamera

    password = os.environ.get("AITAX_CAMERA_PASSWORD") if user else None
    if user and not password:
        raise UserError("--user: set the password in $AITAX_CAMERA_PASSWORD")
    cameras = [SimulatedCamera(CameraSpec(video, port + number, fps=fps, declared_fps=declared_fps,
                                          size=size, user=user, password=password))
               for number, video in enumerate(videos)]
    started: list[SimulatedCamera] = []
    try:
        for simulated in cameras:
            started.append(simulated.start())
            print(f"camera {simulated.url} serving {simulated.spec.video} at {fps:g} fps"
                  f"{f' (declares {declared_fps})' if declared_fps else ''}", flush=True)
        deadline = time.monotonic() + seconds if seconds else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for simulated in started:
            simulated.stop()
    return 0
