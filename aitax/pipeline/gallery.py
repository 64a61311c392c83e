"""Enrollment and classification: the known faces' embeddings, a linear SVM over them, and an "unknown" decision.

The SVM (as in the paper) picks the most likely enrolled identity, but it always picks one: a stranger gets the
name of whoever they resemble most. So a face gets the pick's name only if its score, the mean cosine similarity
to the pick's `NEAREST` closest enrolled photos, reaches `threshold`; otherwise it is "unknown". The few nearest
photos rather than one (a single poor enrollment photo sits close to uninformative inputs) or the identity's
centroid (a blend of poses that resembles many people): on faces degraded as the test videos degrade them, the
mean of 3 nearest missed 2.5% of enrolled faces where the centroid missed 5.8%, at the threshold that named
none of the calibration strangers.

Each enrolled photo gives two rows (`enrollment_crops`): the face as photographed, and with its lower face covered,
as a mask or a scarf covers it. Without the covered row, a covered face of an enrolled person scored 0.42-0.45
against a threshold of 0.45 and came out unknown, 7 frames at a time.

The threshold is chosen on impostors (`calibrate`): faces of people who are not enrolled, scored as they would be
in the pipeline, also under the degradations a camera adds; the lowest threshold that names at most the target
share of them (FPIR, as NIST reports open-set identification). The enrolled faces, each scored against the gallery
without its own photo (both its rows), give the miss rate at that threshold (FNIR). Both are kept in the gallery
file.
`DEFAULT_THRESHOLD` applies only to a gallery enrolled with `--impostors none`.

A gallery is saved as a `.npz` read with `allow_pickle=False`: float32 embeddings, fixed-width unicode labels and
a JSON metadata string, so loading a file can never execute code (a pickled or joblib'd SVM would). The SVM is
not stored but re-fitted at load: a linear SVC on ~100 samples takes milliseconds and libsvm is deterministic for
the same samples in the same order, which the file keeps.
"""

from __future__ import annotations

import json
import logging
import os
import random
import zipfile
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import cv2
import numpy as np
from sklearn.svm import SVC

from aitax.common.errors import UserError
from aitax.pipeline.schema import UNKNOWN, Match

if TYPE_CHECKING:
    from aitax.pipeline.detect import Detection, FaceDetector

log = logging.getLogger(__name__)

GALLERY_FORMAT_VERSION = 1
DEFAULT_THRESHOLD = 0.52  # the calibrated value for the 5-celebrity gallery, rounded
NEAREST = 3  # enrolled photos of the picked identity whose similarities are averaged into the score
_EMBED_BATCH = 16  # enough to get most of batching's speed-up, small enough to bound memory
_UNIT_NORM_TOLERANCE = 1e-3


class Embedder(Protocol):
    weights_sha256: str

    def embed(self, faces_rgb: np.ndarray) -> np.ndarray: ...


DetectAndCrop = Callable[[np.ndarray], list[np.ndarray]]  # RGB photo -> its largest face's 160x160 crops ([]: none)
FindFaces = Callable[[np.ndarray], list["Detection"]]  # RGB photo -> its clear faces
MIN_PHOTOS = 3  # fewer usable photos of a person: enrollment warns that they will be recognised poorly


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Calibration:
    """Where the threshold came from: faces of people who are not enrolled (impostors), scored against the
    gallery, and the enrolled faces themselves, each scored against a gallery without its photo."""

    source: str
    impostor_faces: int
    target_fpir: float
    threshold: float
    impostor_fpir: float  # strangers named as someone enrolled at `threshold`, on the calibration faces
    genuine_fnir: float  # enrolled faces not named correctly at `threshold` (leave one photo out)
    genuine_faces: int

    def describe(self) -> str:
        resolution = "" if self.impostor_faces * self.target_fpir >= 1 else (
            f" (only {self.impostor_faces} impostor faces: FPIR below {1 / self.impostor_faces:.1%} cannot be "
            f"told apart from 0)")
        return (f"threshold {self.threshold:.4f} for FPIR <= {self.target_fpir:.1%}: {self.impostor_fpir:.1%} of "
                f"{self.impostor_faces} impostor faces from {self.source} named, {self.genuine_fnir:.1%} of "
                f"{self.genuine_faces} enrolled faces missed (leave one out){resolution}")


@dataclass
class Gallery:
    """Enrolled faces: row i of `embeddings` (unit-norm float32) is a photo of `labels[i]`."""

    embeddings: np.ndarray = field(repr=False)
    labels: np.ndarray = field(repr=False)
    model_sha256: str
    threshold: float = DEFAULT_THRESHOLD
    created: str = field(default_factory=_now)
    no_face_counts: dict[str, int] = field(default_factory=dict)  # photos skipped at enrollment, per identity
    calibration: Calibration | None = None  # how `threshold` was chosen, when it was calibrated on impostors
    # the photo each row came from, when enrolled in this process: calibration leaves a photo's rows out together
    photos: np.ndarray | None = field(default=None, repr=False)
    _identities: np.ndarray = field(init=False, repr=False)
    _classifier: SVC | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.embeddings = np.ascontiguousarray(self.embeddings, dtype=np.float32)
        self.labels = np.asarray(self.labels, dtype=str)
        if self.embeddings.ndim != 2 or self.labels.shape != (len(self.embeddings),) or not len(self.labels):
            raise ValueError(f"need N embeddings (N, D) and N labels, N >= 1; got {self.embeddings.shape} "
                             f"and {self.labels.shape}")
        if not np.allclose(np.linalg.norm(self.embeddings, axis=1), 1.0, atol=_UNIT_NORM_TOLERANCE):
            raise ValueError("embeddings must be L2-normalised")
        if UNKNOWN in self.labels:
            raise ValueError(f"'{UNKNOWN}' is reserved for faces that match no one")
        self.fit()

    @property
    def identities(self) -> list[str]:
        return self._identities.tolist()

    def fit(self) -> None:
        """Fit the linear SVM on the enrolled embeddings (re-run it after changing them). A single identity needs
        no classifier."""
        self._identities = np.unique(self.labels)  # sorted, like SVC.classes_
        self._classifier = None
        if len(self._identities) > 1:
            self._classifier = SVC(kernel="linear").fit(self.embeddings, self.labels)

    def identify(self, embeddings: np.ndarray) -> list[Match]:
        """For each embedding, the SVM's pick as `candidate`, the mean cosine similarity to the pick's NEAREST
        closest enrolled photos as the score, and the pick's name if the score reaches the threshold (else
        "unknown")."""
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if len(embeddings) == 0:
            return []
        if self._classifier is None:
            candidates = [str(self._identities[0])] * len(embeddings)
        else:
            candidates = [str(name) for name in self._classifier.predict(embeddings)]
        similarities = embeddings @ self.embeddings.T  # (faces, enrolled photos): a few hundred at most
        scores = [float(np.sort(row[self.labels == candidate])[-NEAREST:].mean())
                  for row, candidate in zip(similarities, candidates, strict=True)]
        return [Match(candidate if score >= self.threshold else UNKNOWN, float(score), candidate)
                for candidate, score in zip(candidates, scores, strict=True)]


def calibrate(gallery: Gallery, impostors: np.ndarray, target_fpir: float, source: str) -> Calibration:
    """The lowest threshold at which at most `target_fpir` of the impostor embeddings get an enrolled name."""
    if not 0 <= target_fpir < 1:
        raise UserError(f"--target-fpir {target_fpir}: expected a rate in [0, 1)")
    if len(impostors) == 0:
        raise UserError(f"{source}: no impostor face to calibrate on")
    scores = np.sort([match.score for match in gallery.identify(impostors)])[::-1]
    allowed = int(np.floor(target_fpir * len(scores)))  # impostors that may still reach the threshold
    threshold = float(np.floor(scores[allowed] * 1e4) / 1e4 + 1e-4) if allowed < len(scores) else float(scores[-1])
    named = int((scores >= threshold).sum())
    missed = 0
    photos = np.arange(len(gallery.labels)) if gallery.photos is None else gallery.photos
    for photo in np.unique(photos):
        keep = photos != photo
        left_out = gallery.labels[~keep]
        if len(np.unique(gallery.labels[keep])) < len(gallery.identities):
            missed += len(left_out)  # the person's only photo: nobody left to name them
            continue
        rest = Gallery(gallery.embeddings[keep], gallery.labels[keep], gallery.model_sha256, threshold=threshold)
        missed += sum(match.identity != label
                      for match, label in zip(rest.identify(gallery.embeddings[~keep]), left_out, strict=True))
    return Calibration(source, len(scores), target_fpir, threshold, named / len(scores),
                       missed / len(gallery.labels), len(gallery.labels))


def enrollment_crops(rgb: np.ndarray, detector: FaceDetector) -> list[np.ndarray]:
    """The photo's largest face, aligned: as photographed, and with its lower face covered as the hard camera views
    cover it (`pipeline.degrade`). The covered face is cropped where detection finds it again, as the pipeline
    would crop it, else on the photo's own landmarks (the face has not moved). [] without a face."""
    from aitax.pipeline.crop import face_thumbnail
    from aitax.pipeline.degrade import Look, best_match, degrade

    face = detector.largest(rgb)
    if face is None:
        return []
    covered = degrade(rgb, face.box, Look(occluded=True))
    found = detector.detect(covered)
    match = best_match([d.box for d in found], face.box)
    again = face if match is None else found[match]
    return [face_thumbnail(rgb, face.box, face.landmarks), face_thumbnail(covered, again.box, again.landmarks)]


def embed_in_batches(embedder: Embedder, faces: list[np.ndarray]) -> np.ndarray:
    """Unit embeddings of 160x160 RGB crops, a few at a time (memory stays bounded for any folder)."""
    if not faces:
        return np.empty((0, 128), np.float32)
    return np.concatenate([embedder.embed(np.stack(faces[start:start + _EMBED_BATCH]))
                           for start in range(0, len(faces), _EMBED_BATCH)])


def read_rgb(photo: Path) -> np.ndarray:
    bgr = cv2.imread(str(photo), cv2.IMREAD_COLOR)
    if bgr is None:
        raise UserError(f"{photo}: not a readable image")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def _photos(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


def stranger_faces(folder: Path, find_faces: FindFaces, enrolled: Collection[str] = (),
                   option: str = "--impostors") -> Iterator[tuple[str, Path, np.ndarray, Detection]]:
    """(person, photo, RGB, detection) for faces of people who are not enrolled: every clear face of a loose photo
    (each a person of its own: group photos too) and the largest face of each photo in a sub-folder (one person
    per folder). Photos get a border first: some sets are tight crops, in which MTCNN finds no face. A folder
    named like an enrolled identity is an error: that person would count as a stranger."""
    if not folder.is_dir():
        raise UserError(f"{option} {folder}: not a folder")
    people = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    clash = sorted(p.name for p in people if p.name in enrolled)
    if clash:
        raise UserError(f"{option} {folder}: {', '.join(clash)} is enrolled, not a stranger")
    for photo in _photos(folder):
        rgb = _bordered(read_rgb(photo))
        for i, face in enumerate(find_faces(rgb)):
            yield f"{photo.stem}#{i}", photo, rgb, face
    for person in people:
        for photo in _photos(person):
            rgb = _bordered(read_rgb(photo))
            faces = find_faces(rgb)
            if faces:
                yield person.name, photo, rgb, max(faces, key=lambda face: face.box[2] * face.box[3])


def impostor_thumbnails(faces: Iterable[tuple[str, Path, np.ndarray, Detection]], detector: FaceDetector,
                        views: int, seed: int = 0) -> list[np.ndarray]:
    """Thumbnails of the impostors as the pipeline would see them: each face (from `stranger_faces`) as
    photographed, and in `views` camera views (scaled, rolled, lit, blurred, compressed, occluded as `make-video
    --augment hard` does) where MTCNN, run again as detection would, still finds it. Degraded strangers score
    higher against the gallery than clean ones: a threshold calibrated on clean photos lets them through."""
    from aitax.pipeline.crop import face_thumbnail
    from aitax.pipeline.degrade import AUGMENTATIONS, best_match, camera_views

    rng = random.Random(seed)
    thumbnails = []
    for _, _, rgb, face in faces:
        thumbnails.append(face_thumbnail(rgb, face.box, face.landmarks))
        for view, box in camera_views(rgb, face.box, AUGMENTATIONS["hard"], views, rng):
            found = detector.detect(view)
            match = best_match([d.box for d in found], box)
            if match is not None:
                thumbnails.append(face_thumbnail(view, found[match].box, found[match].landmarks))
    return thumbnails


def _bordered(rgb: np.ndarray) -> np.ndarray:
    pad = max(rgb.shape[:2]) // 4
    return cv2.copyMakeBorder(rgb, pad, pad, pad, pad, cv2.BORDER_REPLICATE)


def enroll(images_dir: Path, detect_and_crop: DetectAndCrop, embedder: Embedder,
           threshold: float = DEFAULT_THRESHOLD) -> Gallery:
    """A gallery from a folder per identity (`images_dir/<identity>/<photo>`). Photos in which no face is found
    are skipped and counted in `Gallery.no_face_counts`; a wrong layout or an unreadable photo is a UserError."""
    if not images_dir.is_dir():
        raise UserError(f"{images_dir}: not a folder of identity sub-folders")
    identity_dirs = sorted(path for path in images_dir.iterdir() if path.is_dir() and not path.name.startswith("."))
    if not identity_dirs:
        raise UserError(f"{images_dir}: no identity sub-folders (expected {images_dir}/<identity>/<photo>.jpg)")
    faces: list[np.ndarray] = []
    labels: list[str] = []
    photo_of_row: list[int] = []
    enrolled_photos = 0
    no_face_counts: dict[str, int] = {}
    for identity_dir in identity_dirs:
        identity = identity_dir.name
        if identity == UNKNOWN:
            raise UserError(f"{identity_dir}: '{UNKNOWN}' is reserved for faces that match no one; rename it")
        photos = _photos(identity_dir)
        if not photos:
            raise UserError(f"{identity_dir}: no photos in this identity folder")
        for photo in photos:
            crops = detect_and_crop(read_rgb(photo))
            if not crops:
                no_face_counts[identity] = no_face_counts.get(identity, 0) + 1
                continue
            photo_of_row += [enrolled_photos] * len(crops)
            enrolled_photos += 1
            faces += crops
            labels += [identity] * len(crops)
    if not faces:
        raise UserError(f"{images_dir}: no face found in any photo")
    missing = sorted(set(no_face_counts) - set(labels))
    if missing:
        log.warning("no face found in any photo of %s: not enrolled", ", ".join(missing))
    for identity in sorted(set(labels)):
        usable = len({photo for photo, label in zip(photo_of_row, labels, strict=True) if label == identity})
        if usable < MIN_PHOTOS:
            log.warning("%s: only %d usable photo(s); fewer than %d make a poor centroid and more missed faces",
                        identity, usable, MIN_PHOTOS)
    return Gallery(embed_in_batches(embedder, faces), np.array(labels), embedder.weights_sha256, threshold=threshold,
                   no_face_counts=no_face_counts, photos=np.array(photo_of_row))


def save_gallery(gallery: Gallery, path: Path) -> None:
    """Write the gallery atomically: a reader never sees a half-written file."""
    metadata = {
        "format_version": GALLERY_FORMAT_VERSION,
        "embedding_model_sha256": gallery.model_sha256,
        "threshold": gallery.threshold,
        "created": gallery.created,
        "no_face_counts": gallery.no_face_counts,
        "calibration": None if gallery.calibration is None else asdict(gallery.calibration),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("wb") as file:  # a file object: np.savez would append ".npz" to a name lacking it
        np.savez(file, embeddings=gallery.embeddings, labels=gallery.labels, metadata=np.array(json.dumps(metadata)))
    os.replace(partial, path)


def load_gallery(path: Path, expected_model_sha256: str | None = None) -> Gallery:
    """Read a gallery written by `save_gallery`; anything wrong with the file is a one-line UserError naming it.
    With `expected_model_sha256`, a gallery enrolled with other FaceNet weights is refused: its embeddings live in
    another space."""
    if not path.is_file():
        raise UserError(f"{path}: no gallery file (enroll first)")
    try:
        with np.load(path, allow_pickle=False) as stored:
            metadata = json.loads(str(stored["metadata"]))
            embeddings, labels = stored["embeddings"], stored["labels"]
        version = metadata["format_version"]
        if version != GALLERY_FORMAT_VERSION:
            raise UserError(f"{path}: gallery format version {version}, this aitax reads version "
                            f"{GALLERY_FORMAT_VERSION} (enroll again)")
        if embeddings.dtype != np.float32 or labels.dtype.kind != "U":
            raise ValueError(f"embeddings {embeddings.dtype} / labels {labels.dtype}, expected float32 / unicode")
        gallery = Gallery(embeddings, labels, model_sha256=str(metadata["embedding_model_sha256"]),
                          threshold=float(metadata["threshold"]), created=str(metadata["created"]),
                          no_face_counts={str(k): int(v) for k, v in metadata["no_face_counts"].items()},
                          calibration=Calibration(**metadata["calibration"]) if metadata.get("calibration") else None)
    except UserError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(f"{path}: not a valid aitax gallery ({reason})") from None
    if expected_model_sha256 is not None and gallery.model_sha256 != expected_model_sha256:
        raise UserError(f"{path}: enrolled with embedding model {gallery.model_sha256}, the loaded model is "
                        f"{expected_model_sha256} (enroll again)")
    return gallery
