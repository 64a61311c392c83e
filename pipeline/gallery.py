"""Enrollment and classification: the known faces' embeddings, a linear SVM over them, and an "unknown" decision.

The SVM (as in the paper) picks the most likely enrolled identity, but it always picks one. The face gets that
name only if its cosine similarity to the identity's centroid (the mean of its enrolled unit embeddings, itself
normalised) reaches `threshold`; otherwise it is "unknown". The centroid, rather than the nearest enrolled photo,
because one poor enrollment photo (a 31x39 px face upscaled to 160x160) sits close to every uninformative input:
uniform noise scored 0.63 against it, above the weakest true match (0.55).

Default threshold 0.40, calibrated with pipeline.facenet on MTCNN crops of the 5-celebrity set (117 faces):
- people who are NOT enrolled (each identity left out of the gallery in turn, all its photos scored against the
  other four) scored at most 0.382 (99th percentile 0.371): none is named at 0.40;
- known people (leave-one-photo-out over all 117): 94% are named at 0.40 (95% at 0.38, 97% at 0.32, where 10% of
  the impostors are named too);
- train enrolled, val scored: 25/25 named correctly, lowest score 0.457;
- uniform, Gaussian and blurred noise images scored at most 0.32.
So 0.40 is the lowest round value that named no impostor. Raise it for fewer false names, lower it to name more
poor-quality faces.

A gallery is saved as a `.npz` read with `allow_pickle=False`: float32 embeddings, fixed-width unicode labels and
a JSON metadata string, so loading a file can never execute code (a pickled or joblib'd SVM would). The SVM is
not stored but re-fitted at load: a linear SVC on ~100 samples takes milliseconds and libsvm is deterministic for
the same samples in the same order, which the file keeps.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np
from sklearn.svm import SVC

from ground.errors import UserError

log = logging.getLogger(__name__)

GALLERY_FORMAT_VERSION = 1
DEFAULT_THRESHOLD = 0.40
UNKNOWN = "unknown"
_EMBED_BATCH = 16  # enough to get most of batching's speed-up, small enough to bound memory
_UNIT_NORM_TOLERANCE = 1e-3


class Embedder(Protocol):
    weights_sha256: str

    def embed(self, faces_rgb: np.ndarray) -> np.ndarray: ...


DetectAndCrop = Callable[[np.ndarray], np.ndarray | None]  # RGB photo -> largest face's 160x160 crop, or None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Gallery:
    """Enrolled faces: row i of `embeddings` (unit-norm float32) is a photo of `labels[i]`."""

    embeddings: np.ndarray = field(repr=False)
    labels: np.ndarray = field(repr=False)
    model_sha256: str
    threshold: float = DEFAULT_THRESHOLD
    created: str = field(default_factory=_now)
    no_face_counts: dict[str, int] = field(default_factory=dict)  # photos skipped at enrollment, per identity
    _identities: np.ndarray = field(init=False, repr=False)
    _centroids: np.ndarray = field(init=False, repr=False)
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
        """Fit the linear SVM and the identities' centroids on the enrolled embeddings (re-run it after changing
        them). A single identity needs no classifier."""
        self._identities = np.unique(self.labels)  # sorted, like SVC.classes_
        sums = np.stack([self.embeddings[self.labels == identity].sum(axis=0) for identity in self._identities])
        self._centroids = sums / np.linalg.norm(sums, axis=1, keepdims=True)
        self._classifier = None
        if len(self._identities) > 1:
            self._classifier = SVC(kernel="linear").fit(self.embeddings, self.labels)

    def identify(self, embeddings: np.ndarray) -> list[tuple[str, float]]:
        """(identity or "unknown", cosine similarity to the centroid of the SVM's pick) for each embedding."""
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if len(embeddings) == 0:
            return []
        if self._classifier is None:
            picks = np.zeros(len(embeddings), dtype=int)
        else:
            picks = np.searchsorted(self._identities, self._classifier.predict(embeddings))
        scores = np.einsum("nd,nd->n", embeddings, self._centroids[picks])
        return [(str(self._identities[pick]) if score >= self.threshold else UNKNOWN, float(score))
                for pick, score in zip(picks, scores, strict=True)]


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
    no_face_counts: dict[str, int] = {}
    for identity_dir in identity_dirs:
        identity = identity_dir.name
        if identity == UNKNOWN:
            raise UserError(f"{identity_dir}: '{UNKNOWN}' is reserved for faces that match no one; rename it")
        photos = sorted(path for path in identity_dir.iterdir() if path.is_file() and not path.name.startswith("."))
        if not photos:
            raise UserError(f"{identity_dir}: no photos in this identity folder")
        for photo in photos:
            bgr = cv2.imread(str(photo), cv2.IMREAD_COLOR)
            if bgr is None:
                raise UserError(f"{photo}: not a readable image")
            face = detect_and_crop(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
            if face is None:
                no_face_counts[identity] = no_face_counts.get(identity, 0) + 1
                continue
            faces.append(face)
            labels.append(identity)
    if not faces:
        raise UserError(f"{images_dir}: no face found in any photo")
    missing = sorted(set(no_face_counts) - set(labels))
    if missing:
        log.warning("no face found in any photo of %s: not enrolled", ", ".join(missing))
    batches = [embedder.embed(np.stack(faces[start:start + _EMBED_BATCH]))
               for start in range(0, len(faces), _EMBED_BATCH)]
    return Gallery(np.concatenate(batches), np.array(labels), embedder.weights_sha256, threshold=threshold,
                   no_face_counts=no_face_counts)


def save_gallery(gallery: Gallery, path: Path) -> None:
    """Write the gallery atomically: a reader never sees a half-written file."""
    metadata = {
        "format_version": GALLERY_FORMAT_VERSION,
        "embedding_model_sha256": gallery.model_sha256,
        "threshold": gallery.threshold,
        "created": gallery.created,
        "no_face_counts": gallery.no_face_counts,
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
                          no_face_counts={str(k): int(v) for k, v in metadata["no_face_counts"].items()})
    except UserError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(f"{path}: not a valid aitax gallery ({reason})") from None
    if expected_model_sha256 is not None and gallery.model_sha256 != expected_model_sha256:
        raise UserError(f"{path}: enrolled with embedding model {gallery.model_sha256}, the loaded model is "
                        f"{expected_model_sha256} (enroll again)")
    return gallery
