"""The pipeline's inputs: a test video with its ground truth, and a gallery of enrolled people."""

from __future__ import annotations

from pathlib import Path

import click

from aitax.commands.options import DIR, FILE
from aitax.common.errors import UserError
from aitax.pipeline.inputs import compose_video, enroll_gallery


def register(root: click.Group) -> None:
    """Add this module's commands, in the order `aitax --help` lists them."""
    for command in (make_video, enroll):
        root.add_command(command)


@click.command("make-video", short_help="compose a test video of real faces, with ground truth",
               help="Real face photos (never enrolled ones) moving over a 1920x1080 scene; writes V.mp4 and "
                    "V.truth.json.")
@click.option("--faces", type=DIR, help="folder per identity (default: the 5-celebrity val split)")
@click.option("--out", type=FILE, required=True, help="the .mp4 to write")
@click.option("--seconds", type=float, default=60.0, show_default=True, help="length")
@click.option("--fps", type=float, default=10.0, show_default=True, help="frame rate: the paper's per-stream rate")
@click.option("--seed", type=int, default=7, show_default=True, help="random seed of the face schedule")
@click.option("--augment", default="none", metavar="none|hard|small",
              help="none; hard: faces 100-430 px, +-8 degree roll, +-30% light, blur, motion blur, JPEG 30-95, "
                   "10% occluded, over a cluttered scene; small: the same with faces 40-200 px")
@click.option("--strangers", metavar="DIR|packaged",
              help="photos of people who are NOT enrolled (a folder per person, or group photos; packaged: the test "
                   "strangers, never used for calibration): about 30% of the faces become theirs and must come out "
                   "unknown")
def make_video(faces: Path | None, out: Path, seconds: float, fps: float, seed: int, augment: str,
               strangers: str | None) -> int:
    compose_video(faces, out, seconds, fps, seed, augment, strangers)
    return 0


@click.command(short_help="build a gallery from a folder per identity",
               help="MTCNN crop -> FaceNet embeddings -> SVM, saved as a gallery that cannot execute code when loaded "
                    "(.npz, no pickle).")
@click.option("--images", type=DIR, help="folder per identity (default: the 5-celebrity train split)")
@click.option("--out", type=FILE, required=True, help="gallery file to write (.npz)")
@click.option("--impostors", default="packaged", metavar="DIR|packaged|none",
              help="photos of people who are NOT enrolled, to choose the unknown threshold on (default: the packaged "
                   "calibration strangers; none keeps the fixed threshold)")
@click.option("--target-fpir", type=float, default=0.01, metavar="RATE", show_default=True,
              help="the share of strangers the threshold may still name as someone enrolled")
@click.option("--impostor-views", type=int, default=4, metavar="N", show_default=True,
              help="camera views of each impostor face also scored: scaled, rolled, lit, blurred, compressed, "
                   "occluded as in make-video --augment hard")
def enroll(images: Path | None, out: Path, impostors: str, target_fpir: float, impostor_views: int) -> int:
    if impostor_views < 0:
        raise UserError(f"--impostor-views {impostor_views}: 0 or more")
    enroll_gallery(images, out, impostors, target_fpir, impostor_views)
    return 0
