"""MTCNN's inputs and box arithmetic give what the package's give, and the detector finds the boxes stock `mtcnn`
finds."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from aitax.pipeline.crop import iou
from aitax.pipeline.detect import (
    FaceDetector,
    _inside,
    _landmarks_in_frame,
    _offset,
    _rescored,
    _square,
    level_sizes,
    pnet_candidates,
    scale_pyramid,
    suppress,
)
from aitax.pipeline.prepare import area_pyramid, patches


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    noise = np.random.default_rng(7).integers(0, 256, (540, 960, 3), dtype=np.uint8)
    return cv2.GaussianBlur(noise, (7, 7), 3)  # image-like: neighbouring pixels correlate


def test_patches_match_the_packages_crop_of_the_normalised_frame(frame: np.ndarray) -> None:
    import tensorflow as tf

    # Inside, across every edge, fractional corners, and one larger than the frame: TF samples 0 outside.
    boxes = np.array([[100, 50, 180, 140], [-20, -10, 40, 60], [900, 500, 1000, 560], [10.5, 20.25, 50.75, 61.5],
                      [-100, -100, 1100, 700]], dtype=np.float64)
    normalized = (frame.astype(np.float32) - 127.5) / 128
    for size in (24, 48):
        ours = patches(frame, boxes, size)
        yx = boxes[:, [1, 0, 3, 2]] / np.array([540, 960, 540, 960])
        theirs = tf.image.crop_and_resize(normalized[None], yx, np.zeros(len(boxes), np.int32), (size, size)).numpy()
        assert ours.shape == (len(boxes), size, size, 3) and ours.dtype == np.float32
        assert np.abs(ours - theirs).max() < 1e-4


@pytest.mark.parametrize(("height", "width", "min_face"), [(540, 960, 40), (540, 960, 20), (301, 457, 20)])
def test_the_pyramid_is_tensorflows_area_resize_of_the_normalised_frame(frame: np.ndarray, height: int, width: int,
                                                                        min_face: int) -> None:
    import tensorflow as tf

    image = np.ascontiguousarray(frame[:height, :width])
    sizes = level_sizes(width, height, scale_pyramid(width, height, min_face))
    normalized = (tf.cast(image[None], tf.float32) - 127.5) * (1 / 128)  # the package's normalize_images
    levels = area_pyramid(image, sizes)
    assert [level.shape for level in levels] == [(1, h, w, 3) for h, w in sizes] and len(sizes) >= 6
    for level, size in zip(levels, sizes, strict=True):
        theirs = tf.image.resize(normalized, size, method=tf.image.ResizeMethod.AREA).numpy()
        assert level.dtype == np.float32 and np.abs(level - theirs).max() < 1e-4


def test_candidates_and_suppression_are_the_packages() -> None:
    import tensorflow as tf
    from mtcnn.utils.bboxes import generate_bounding_box, smart_nms_from_bboxes, upscale_bboxes

    rng = np.random.default_rng(3)
    regression = rng.normal(0, 0.2, (1, 40, 60, 4)).astype(np.float32)
    probability = rng.uniform(0, 1, (1, 40, 60, 2)).astype(np.float32)
    theirs = upscale_bboxes(generate_bounding_box(tf.constant(regression), tf.constant(probability), 0.6),
                            np.asarray([0.3]))
    ours = pnet_candidates(regression[0], probability[0, :, :, 1], 0.3, 0.6)
    assert len(ours) > 100
    np.testing.assert_array_equal(ours, theirs)
    for threshold, method, sort in ((0.5, "union", False), (0.7, "union", True), (0.7, "min", True)):
        expected = smart_nms_from_bboxes(theirs, threshold=threshold, method=method, initial_sort=sort)
        kept = suppress(ours, threshold, method, sort)
        assert 0 < len(kept) < len(ours)
        np.testing.assert_array_equal(kept, expected)


def test_the_box_arithmetic_is_the_packages() -> None:
    import tensorflow as tf
    from mtcnn.utils.bboxes import adjust_bboxes, limit_bboxes, replace_confidence, resize_to_square
    from mtcnn.utils.landmarks import adjust_landmarks

    rng = np.random.default_rng(5)
    corners = np.sort(rng.uniform(-50, 1000, (30, 2, 2)), axis=1).reshape(30, 4)  # x1 y1 x2 y2
    boxes = np.column_stack([np.zeros(30), corners, rng.uniform(0, 1, 30)])
    scores, offsets = rng.uniform(0, 1, (30, 2)), rng.normal(0, 0.1, (30, 4))
    landmarks = rng.uniform(0, 1, (30, 10)).astype(np.float32)
    np.testing.assert_array_equal(_square(boxes), resize_to_square(boxes))
    np.testing.assert_array_equal(_rescored(boxes, scores), replace_confidence(boxes.copy(), scores))
    np.testing.assert_array_equal(_offset(boxes, offsets), adjust_bboxes(boxes, offsets))
    np.testing.assert_array_equal(_landmarks_in_frame(landmarks, boxes),
                                  adjust_landmarks(tf.constant(landmarks), boxes))
    with_landmarks = np.concatenate([boxes, rng.uniform(-50, 1000, (30, 10))], axis=1)
    np.testing.assert_array_equal(_inside(with_landmarks, 960, 540),
                                  limit_bboxes(with_landmarks, np.asarray([(540, 960, 3)]), limit_landmarks=False))


def test_the_conversion_is_kept_and_a_detector_then_starts_without_tensorflow(
        assets, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Converted once and kept beside the downloads: a fresh process's detector reads it, imports no TensorFlow
    (what makes a detect process start in about 3 CPU-seconds) and finds what this process's detector finds."""
    import gc
    import os
    import subprocess
    import sys

    from aitax.common.paths import PROJECT_ROOT

    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    photo = sorted(assets.faces_val_dir.glob("*/*.jpg"))[1]
    rgb = cv2.cvtColor(cv2.imread(str(photo)), cv2.COLOR_BGR2RGB)
    converting = FaceDetector(min_face_size=20)  # nothing kept yet: it converts, and runs what it converted
    gc.collect()  # TensorFlow's models are gone: the conversion must hold its own weights
    boxes = [d.box for d in converting.detect(rgb)]
    kept = tmp_path / "downloads" / "models" / "mtcnn-openvino"
    assert sorted(path.name.split("-")[0] + path.suffix for path in kept.iterdir()) == [
        "onet.bin", "onet.xml", "pnet.bin", "pnet.xml", "rnet.bin", "rnet.xml"]  # no scratch folder left behind
    script = ("import sys\nimport cv2\nfrom aitax.pipeline.detect import FaceDetector\n"
              "rgb = cv2.cvtColor(cv2.imread(sys.argv[1]), cv2.COLOR_BGR2RGB)\n"
              "print([d.box for d in FaceDetector(min_face_size=20).detect(rgb)], 'tensorflow' in sys.modules)\n")
    started = subprocess.run([sys.executable, "-c", script, str(photo)], cwd=PROJECT_ROOT, capture_output=True,
                             env={**os.environ, "AITAX_HOME": str(tmp_path)}, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-2000:]
    assert boxes and started.stdout.strip() == f"{boxes} False"


def test_a_streams_frame_size_runs_its_own_graphs_and_finds_what_the_relaxed_ones_find(assets) -> None:
    photo = sorted(assets.faces_val_dir.glob("*/*.jpg"))[0]
    rgb = cv2.cvtColor(cv2.imread(str(photo)), cv2.COLOR_BGR2RGB)
    height, width = rgb.shape[:2]
    relaxed, stream = FaceDetector(min_face_size=20), FaceDetector(min_face_size=20, frame_size=(width, height))
    found, found_by_stream = relaxed.detect(rgb), stream.detect(rgb)
    assert not relaxed._pnet_levels and len(stream._pnet_levels) == len(stream._stream_sizes) >= 6
    assert found and [d.box for d in found] == [d.box for d in found_by_stream]
    np.testing.assert_allclose([d.confidence for d in found], [d.confidence for d in found_by_stream], atol=1e-5)
    assert stream.detect(cv2.resize(rgb, (width // 2 * 2 - 2, height)))  # another size: PNet for any shape


def test_a_hint_finds_a_face_pnet_missed_and_no_face_where_there_is_none(assets) -> None:
    photo = sorted(assets.faces_val_dir.glob("*/*.jpg"))[0]
    rgb = cv2.cvtColor(cv2.imread(str(photo)), cv2.COLOR_BGR2RGB)
    face = FaceDetector(min_face_size=20).largest(rgb)
    assert face is not None
    x, y, w, h = face.box
    blind = FaceDetector(min_face_size=20, thresholds=(1.0, 0.7, 0.8))  # PNet proposes nothing
    assert blind.detect(rgb) == []
    hinted = blind.detect(rgb, hints=[(x + w // 10, y - h // 10, w, h)])  # where a track expects it, a little off
    assert len(hinted) == 1 and iou(hinted[0].box, face.box) >= 0.7 and len(hinted[0].landmarks) == 5
    assert not hinted[0].hinted  # confident enough to start a face of its own
    assert blind.detect(rgb, hints=[(0, 0, w // 3, h // 3)]) == []  # a corner of background: ONet says no
    # Below a new face's confidence but above the follow threshold: a hinted face, for a track to continue only.
    strict = FaceDetector(min_face_size=20, thresholds=(1.0, 0.7, 1.0), follow_threshold=0.5)
    assert [d.hinted for d in strict.detect(rgb, hints=[face.box])] == [True]
    # Looking at a box alone (an earlier frame, where a face found later was): the same judgement, no PNet.
    looked = FaceDetector(min_face_size=20).look(rgb, [(x + w // 10, y - h // 10, w, h)])
    assert len(looked) == 1 and iou(looked[0].box, face.box) >= 0.7
    assert FaceDetector(min_face_size=20).look(rgb, [(0, 0, w // 3, h // 3)]) == []


def test_boxes_agree_with_stock_mtcnn(assets) -> None:
    from mtcnn import MTCNN

    ours, stock = FaceDetector(min_face_size=20), MTCNN()
    compared = 0
    for photo in sorted(assets.faces_val_dir.glob("*/*.jpg"))[:12]:
        rgb = cv2.cvtColor(cv2.imread(str(photo)), cv2.COLOR_BGR2RGB)
        found = ours.detect(rgb)
        for face in stock.detect_faces(rgb):
            compared += 1
            box = tuple(int(v) for v in face["box"])
            match = max(found, key=lambda d: iou(box, d.box))
            assert iou(box, match.box) >= 0.9, (photo.name, box, found)
            # The same five landmarks, in the same order, within 2 px (stock rounds to whole pixels).
            stock_points = [face["keypoints"][name] for name in
                            ("left_eye", "right_eye", "nose", "mouth_left", "mouth_right")]
            assert np.abs(np.array(match.landmarks) - np.array(stock_points)).max() <= 2, (photo.name, match)
    assert compared >= 12


def test_the_cuda_runtimes_networks_find_the_openvino_detectors_boxes(assets) -> None:
    """`--runtime cuda` runs the same three networks converted to ONNX as torch modules: checked on the CPU (no GPU
    here), the boxes, landmarks and confidences of the OpenVINO detector on 25 photos (PNet's pooling rewritten)."""
    cpu = FaceDetector(min_face_size=20)
    converted = FaceDetector(min_face_size=20, runtime="cuda", device="cpu")
    faces = 0
    for photo in sorted(assets.faces_val_dir.glob("*/*.jpg"))[:25]:
        rgb = cv2.cvtColor(cv2.imread(str(photo)), cv2.COLOR_BGR2RGB)
        expected, found = cpu.detect(rgb), converted.detect(rgb)
        assert [d.box for d in found] == [d.box for d in expected], photo.name
        np.testing.assert_allclose([d.confidence for d in found], [d.confidence for d in expected], atol=1e-4)
        np.testing.assert_allclose([d.landmarks for d in found], [d.landmarks for d in expected], atol=1)
        faces += len(expected)
    assert faces >= 25
    height, width = rgb.shape[:2]  # a stream's detector: one PNet session for every level, warmed at each
    stream = FaceDetector(min_face_size=20, frame_size=(width, height), runtime="cuda", device="cpu")
    assert [d.box for d in stream.detect(rgb)] == [d.box for d in expected]


def test_cuda_detection_without_a_gpu_is_one_line_naming_what_to_install() -> None:
    from aitax.common.errors import UserError
    from aitax.pipeline.onnx_models import GPU_EXTRA

    with pytest.raises(UserError) as raised:
        FaceDetector(runtime="cuda")  # CI's machines have no GPU
    assert "finds no CUDA GPU" in str(raised.value) and GPU_EXTRA in str(raised.value)
    assert "\n" not in str(raised.value)
    with pytest.raises(UserError, match="--runtime 'rocm': expected one of openvino, cuda"):
        FaceDetector(runtime="rocm")


def test_a_process_that_dropped_its_detector_still_stops_cleanly_on_sigterm(tmp_path) -> None:
    """SIGTERM is how a pod or a run's load is stopped: once a detector (its OpenVINO models) was dropped, a later
    SIGTERM still reaches the Python handler (a dropped OpenVINO Core unloaded the CPU plugin, and the signal then
    crashed the process with a segmentation fault)."""
    import subprocess
    import sys

    from aitax.common.paths import PROJECT_ROOT

    script = ("import gc\nfrom aitax.pipeline.detect import FaceDetector\n"
              "detector = FaceDetector(min_face_size=20)\ndel detector\ngc.collect()\n"
              "from tests.unit.test_run_load_stop import "
              "test_sigterm_during_the_load_ends_it_early_and_it_is_still_drained_and_collected as stopped\n"
              "stopped()\nprint('stopped cleanly')\n")
    finished = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=300)
    assert finished.returncode == 0 and "stopped cleanly" in finished.stdout, (finished.returncode,
                                                                              finished.stderr[-2000:])
