"""YuNet, the detector beside MTCNN: the same faces, landmarks in MTCNN's order, hints judged as MTCNN's are."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from aitax.common.errors import UserError
from aitax.pipeline.assets import ensure_yunet
from aitax.pipeline.crop import iou
from aitax.pipeline.detect import FaceDetector
from aitax.pipeline.ingest_detect import FaceFinder
from aitax.pipeline.yunet import SMALLEST_FACE_PX, YuNetDetector


@pytest.fixture(scope="module")
def model():
    return ensure_yunet()


def _photos(assets, count: int) -> list[np.ndarray]:
    paths = sorted(assets.faces_val_dir.glob("*/*.jpg"))[:count]
    return [cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB) for path in paths]


def test_yunet_finds_mtcnns_faces_with_landmarks_in_mtcnns_order(assets, model) -> None:
    yunet, mtcnn = YuNetDetector(model), FaceDetector(min_face_size=20)
    compared = 0
    for rgb in _photos(assets, 8):
        face, reference = yunet.largest(rgb, 0.6), mtcnn.largest(rgb)
        if reference is None:
            continue
        compared += 1
        assert face is not None and iou(face.box, reference.box) >= 0.5
        # the eye and mouth corner on the picture's left first, as MTCNN's: an aligned thumbnail is the same face
        (left_eye, right_eye, nose, left_mouth, right_mouth) = face.landmarks
        assert left_eye[0] < right_eye[0] and left_mouth[0] < right_mouth[0]
        assert max(left_eye[1], right_eye[1]) < nose[1] < min(left_mouth[1], right_mouth[1])
        distance = np.abs(np.subtract(face.landmarks, reference.landmarks)).max()
        assert distance < 0.15 * reference.box[2]
    assert compared >= 5


def test_a_face_below_the_new_face_threshold_only_continues_a_hint(assets, model) -> None:
    rgb = _photos(assets, 1)[0]
    face = YuNetDetector(model).largest(rgb, 0.6)
    assert face is not None
    strict = YuNetDetector(model, score_threshold=0.999, follow_threshold=0.4)  # the face is below 0.999
    assert strict.detect(rgb) == []
    hinted = strict.detect(rgb, hints=[face.box])
    assert len(hinted) == 1 and hinted[0].hinted and iou(hinted[0].box, face.box) >= 0.9
    width, height = face.box[2], face.box[3]
    assert strict.detect(rgb, hints=[(0, 0, width // 3, height // 3)]) == []  # no face where the hint is
    assert [d.box for d in YuNetDetector(model).look(rgb, [face.box])] == [face.box]
    assert YuNetDetector(model).look(rgb, [(0, 0, width // 3, height // 3)]) == []
    assert YuNetDetector(model).look(rgb, []) == []


def test_faces_well_under_the_smallest_are_left_out(assets, model) -> None:
    rgb = _photos(assets, 1)[0]
    face = YuNetDetector(model).largest(rgb, 0.6)
    assert face is not None
    assert YuNetDetector(model, min_face_size=2 * face.box[2]).detect(rgb) == []


def test_the_finder_makes_aligned_thumbnails_from_yunets_faces(assets, model) -> None:
    from aitax.telemetry.timing import Stopwatch

    rgb = _photos(assets, 1)[0]
    watch = Stopwatch()
    found = FaceFinder(20, detector="yunet")(rgb, watch)
    assert found and all(face.thumbnail.startswith(b"\x89PNG") for face in found)
    thumbnail = cv2.imdecode(np.frombuffer(found[0].thumbnail, np.uint8), cv2.IMREAD_COLOR)
    assert thumbnail.shape == (160, 160, 3)
    assert watch.ms["yunet"] > 0


def test_a_frame_looked_at_smaller_gives_the_same_face_in_the_frames_own_pixels(assets, model) -> None:
    rgb = _photos(assets, 1)[0]
    whole = YuNetDetector(model, min_face_size=SMALLEST_FACE_PX).largest(rgb, 0.6)  # scale 1
    halved = YuNetDetector(model, min_face_size=2 * SMALLEST_FACE_PX).largest(rgb, 0.6)  # looked at half size
    assert whole is not None and halved is not None
    assert iou(whole.box, halved.box) > 0.8
    assert np.abs(np.array(whole.landmarks) - np.array(halved.landmarks)).max() < 0.1 * whole.box[2]


def test_a_wrong_detector_is_one_line_naming_it() -> None:
    with pytest.raises(UserError, match="--detector 'retina'"):
        FaceFinder(40, detector="retina")
    with pytest.raises(UserError, match="--detector yunet runs on the CPU"):
        FaceFinder(40, detector="yunet", runtime="cuda")
    with pytest.raises(ValueError, match="follow_threshold"):
        YuNetDetector(ensure_yunet(), score_threshold=0.5, follow_threshold=0.6)
