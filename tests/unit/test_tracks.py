"""Faces followed across frames: the tracker, the send policy, a track named by its evidence, and the records."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from aitax.pipeline.evaluate import named_by_track, time_to_first_name
from aitax.pipeline.gallery import Gallery
from aitax.pipeline.schema import (
    META_HEADER,
    TRACKED,
    UNKNOWN,
    UNTRACKED,
    FaceMessage,
    FaceMeta,
    IdentityMessage,
    MalformedRecordError,
    Match,
    decode_face,
    encode_face,
)
from aitax.pipeline.track_names import HOLD_MARGIN, TrackNames
from aitax.pipeline.tracking import TRACKS_PER_FRAME, FaceTracker, SendPolicy, StreamTracks, TrackLanes


def test_a_moving_face_keeps_its_track_through_short_misses_and_a_second_face_has_its_own() -> None:
    tracker = FaceTracker(max_missed_frames=3)
    walker, sitter = [], []
    for frame in range(12):
        boxes = [(300, 200, 60, 60)]
        if frame not in (4, 5, 6):  # missed for three frames
            boxes.insert(0, (100 + 12 * frame, 100, 50, 50))
        ids = tracker.update(frame, boxes)
        sitter.append(ids[-1])
        if len(ids) == 2:
            walker.append(ids[0])
    assert len(set(walker)) == 1 and len(set(sitter)) == 1
    assert walker[0] != sitter[0]


def test_a_track_unseen_longer_than_its_misses_ends_and_the_face_after_it_starts_another() -> None:
    tracker = FaceTracker(max_missed_frames=2)
    first = tracker.update(0, [(100, 100, 50, 50)])[0]
    assert tracker.update(1, [(102, 100, 50, 50)]) == [first]
    assert tracker.update(5, [(104, 100, 50, 50)]) != [first]  # unseen for 3 frames


def test_a_small_fast_face_that_overlaps_nothing_still_continues_its_track_but_a_far_one_does_not() -> None:
    tracker = FaceTracker()
    first = tracker.update(0, [(100, 100, 20, 20)])[0]
    assert tracker.update(1, [(110, 100, 20, 20)]) == [first]  # moved half its size: no overlap with 0's box
    assert tracker.update(2, [(300, 300, 20, 20)]) != [first]


def test_track_ids_are_unique_in_a_run_even_when_a_resumed_tracker_starts_again() -> None:
    before = FaceTracker().update(10, [(0, 0, 40, 40), (100, 0, 40, 40)])
    after = FaceTracker().update(11, [(0, 0, 40, 40)])  # a resumed ingest-detect: a fresh tracker
    assert before == [10 * TRACKS_PER_FRAME, 10 * TRACKS_PER_FRAME + 1]
    assert not set(before) & set(after)


def test_every_sends_every_face_and_a_sample_sends_the_first_then_every_nth_or_a_grown_face() -> None:
    assert all(SendPolicy.parse("every").sends("s", 1, frame, (0, 0, 40, 40)) for frame in range(20))
    sample = SendPolicy.parse("sample:5")
    sent = [frame for frame in range(12) if sample.sends("s", 1, frame, (0, 0, 40, 40))]
    assert sent == [0, 5, 10]
    assert sample.sends("s", 1, 11, (0, 0, 50, 50))  # 1.56x the area: sent at once
    assert sample.sends("s", 2, 11, (0, 0, 40, 40))  # another track's first face


@pytest.mark.parametrize("text", ["sample:0", "sample:x", "some", "every:3"])
def test_a_bad_send_policy_is_named(text: str) -> None:
    with pytest.raises(ValueError, match="send policy"):
        SendPolicy.parse(text)


def test_stream_tracks_give_each_stream_its_own_tracks() -> None:
    tracks = StreamTracks(SendPolicy.parse("sample:10"))
    assert tracks.follow("a", 0, [(0, 0, 40, 40)]) == [(0, True, (), True)]  # a new track, its first face sent
    assert tracks.follow("b", 0, [(0, 0, 40, 40)]) == [(0, True, (), True)]
    assert tracks.follow("a", 1, [(1, 0, 40, 40)]) == [(0, False, (), False)]


def _gallery() -> Gallery:
    """Two people on orthogonal axes, three photos each, close to their axis."""
    rng = np.random.default_rng(0)
    rows = []
    for axis in (0, 1):
        for _ in range(3):
            row = np.zeros(16, np.float32)
            row[axis] = 1.0
            row += rng.normal(0, 0.05, 16).astype(np.float32)
            rows.append(row / np.linalg.norm(row))
    return Gallery(np.stack(rows), np.array(["alice"] * 3 + ["bob"] * 3), "sha", threshold=0.75)


def _look(axis: int, noise: float, rng: np.random.Generator) -> np.ndarray:
    """A face of the person on `axis`, seen through noise."""
    row = np.zeros(16, np.float32)
    row[axis] = 1.0
    row += rng.normal(0, noise, 16).astype(np.float32)
    return row / np.linalg.norm(row)


def test_a_track_named_by_its_evidence_is_named_where_its_single_faces_are_not() -> None:
    gallery, rng = _gallery(), np.random.default_rng(1)
    looks = [_look(0, 0.25, rng) for _ in range(30)]
    alone = [match.identity for match in gallery.identify(np.stack(looks))]
    names = TrackNames(gallery)
    by_track = [names.name(("r", "s", 7), look) for look in looks]
    assert alone.count("alice") < 20  # one noisy look often falls short of the threshold
    assert [m.identity for m in by_track[10:]] == ["alice"] * 20  # the evidence does not
    assert [m.evidence_frames for m in by_track] == list(range(1, 31))


def test_a_track_that_jumps_to_another_person_starts_its_evidence_again() -> None:
    gallery, rng = _gallery(), np.random.default_rng(2)
    names = TrackNames(gallery)
    for _ in range(10):
        names.name(("r", "s", 1), _look(0, 0.05, rng))
    after = names.name(("r", "s", 1), _look(1, 0.05, rng))
    assert after.identity == "bob" and after.evidence_frames == 1 and names.person_changes == 1


def _at(score: float) -> np.ndarray:
    """A face whose cosine to alice's photos is about `score` (an axis nobody is on takes the rest)."""
    row = np.zeros(16, np.float32)
    row[0], row[2] = score, np.sqrt(1 - score**2)
    return row


def test_a_named_track_keeps_its_name_just_below_the_threshold_and_loses_it_clearly_below() -> None:
    gallery = _gallery()
    names = TrackNames(gallery)
    named = names.name(("r", "s", 1), _at(gallery.threshold + 0.05))
    assert named.identity == "alice"
    held = names.name(("r", "s", 1), _at(gallery.threshold - 0.08))  # the mean: just below
    assert gallery.threshold - HOLD_MARGIN <= held.score < gallery.threshold and held.identity == "alice"
    for _ in range(3):  # the mean sinks well below the hold
        lost = names.name(("r", "s", 1), _at(gallery.threshold - 0.15))
    assert lost.identity == UNKNOWN and lost.candidate == "alice"
    fresh = TrackNames(gallery).name(("r", "s", 2), _at(gallery.threshold - 0.01))
    assert fresh.identity == UNKNOWN  # a track never named is not named below the threshold


def test_a_tracked_face_is_answered_from_its_track_and_unknown_with_no_evidence() -> None:
    gallery, rng = _gallery(), np.random.default_rng(3)
    names = TrackNames(gallery)
    assert names.recall(("r", "s", 1)) == Match(UNKNOWN, 0.0, "", 0)
    names.name(("r", "s", 1), _look(1, 0.05, rng))
    assert names.recall(("r", "s", 1)).identity == "bob"


def test_per_frame_evidence_names_each_face_alone_and_remembers_the_last_answer() -> None:
    gallery, rng = _gallery(), np.random.default_rng(4)
    names = TrackNames(gallery, accumulate=False)
    for _ in range(5):
        match = names.name(("r", "s", 1), _look(0, 0.05, rng))
        assert match.evidence_frames == 1
    assert names.recall(("r", "s", 1)) == match


def _face(track_id: int = 4, encoding: str = "png", thumbnail: bytes = b"png") -> FaceMessage:
    return FaceMessage(FaceMeta("r", "cam", 3, 0, 1, (1, 2, 30, 30), 0.9, encoding, 0, 0, 0, 0, 0, 0,
                                track_id=track_id), thumbnail)


def test_tracked_faces_travel_without_a_thumbnail_keyed_by_their_track() -> None:
    key, value, headers = encode_face(_face(encoding=TRACKED, thumbnail=b""))
    assert key == b"cam/track/4" and value == b""
    assert decode_face(value, headers) == _face(encoding=TRACKED, thumbnail=b"")
    assert encode_face(_face(UNTRACKED))[0] == b"cam/3/0"  # an untracked face is keyed as a face


def test_a_tracked_face_with_pixels_or_without_a_track_is_malformed_and_an_older_face_reads_untracked() -> None:
    _, _, headers = encode_face(_face(encoding=TRACKED, thumbnail=b""))
    with pytest.raises(MalformedRecordError, match="carries no thumbnail"):
        decode_face(b"pixels", headers)
    _, _, headers = encode_face(_face(UNTRACKED, encoding=TRACKED, thumbnail=b""))
    with pytest.raises(MalformedRecordError, match="needs its track_id"):
        decode_face(b"", headers)
    _, value, headers = encode_face(_face())
    older = {**headers, META_HEADER: headers[META_HEADER].replace(b',"track_id":4', b"")}
    assert decode_face(value, older).meta.track_id == UNTRACKED


def _identity(frame: int, track: int, name: str, evidence: int) -> IdentityMessage:
    return replace(IdentityMessage.answering(_face(track).meta, Match(name, 0.5, name, evidence), appended_ns=0,
                                             requested_ns=0, fetched_ns=0, identify_start_ns=0,
                                             identified_ns=frame, batch_size=1), frame_index=frame, face_index=track)


def test_a_reader_by_track_gives_every_face_its_tracks_best_supported_name() -> None:
    identities = [_identity(0, 4, UNKNOWN, 1), _identity(1, 4, "alice", 2), _identity(2, 4, "alice", 3),
                  _identity(0, 5, "bob", 1), replace(_identity(0, 9, "carol", 1), track_id=UNTRACKED)]
    named = named_by_track(identities)
    assert [i.identity for i in named] == ["alice", "alice", "alice", "bob", "carol"]
    assert [i.evidence_frames for i in named] == [3, 3, 3, 1, 1]


def test_where_a_tracks_evidence_falls_a_new_stretch_is_named_on_its_own() -> None:
    """A stranger's stretch of a track that then follows someone enrolled keeps its own (unknown) name."""
    identities = [_identity(0, 4, UNKNOWN, 1), _identity(1, 4, UNKNOWN, 2), _identity(2, 4, "alice", 1),
                  _identity(3, 4, "alice", 2), _identity(4, 4, "alice", 3)]
    assert [i.identity for i in named_by_track(identities)] == [UNKNOWN, UNKNOWN, "alice", "alice", "alice"]


def test_time_to_a_tracks_first_name_runs_from_its_first_face_to_the_identity_that_named_it() -> None:
    identities = [replace(_identity(frame, 4, name, frame + 1), scheduled_ns=frame * 100_000_000,
                          delivered_ns=frame * 100_000_000 + 50_000_000)
                  for frame, name in enumerate([UNKNOWN, UNKNOWN, "alice", "alice"])]
    identities.append(replace(_identity(0, 5, UNKNOWN, 1), delivered_ns=1))  # a stranger's track: never named
    waits = time_to_first_name(identities)
    assert waits is not None and waits.count == 1 and waits.p50_ms == 250.0


def test_faces_that_touch_or_tracks_found_only_by_nearness_send_their_thumbnail_under_a_sample() -> None:
    tracks = StreamTracks(SendPolicy.parse("sample:10"))
    tracks.follow("s", 0, [(100, 100, 40, 40), (300, 100, 40, 40)])
    assert tracks.follow("s", 1, [(101, 100, 40, 40), (300, 100, 40, 40)]) == [(0, False, (), False),
                                                                                (1, False, (), False)]
    crossing = tracks.follow("s", 2, [(102, 100, 40, 40), (135, 100, 40, 40)])  # the second jumped onto the first
    assert all(sent.thumbnail for sent in crossing)


def test_a_face_missed_for_a_few_frames_is_reported_for_them_when_it_is_found_again() -> None:
    tracker = FaceTracker()
    tracker.follow(0, [(100, 100, 40, 40)])
    assert tracker.follow(3, [(106, 100, 40, 40)])[0].missed == ((1, (102, 100, 40, 40)), (2, (104, 100, 40, 40)))
    assert tracker.follow(15, [(106, 100, 40, 40)])[0].missed == ()  # missed 11 frames: its track has ended


def test_a_hinted_face_continues_a_track_but_never_starts_one_nor_keeps_it_alive() -> None:
    tracker = FaceTracker(max_missed_frames=3)
    first = tracker.follow(0, [(100, 100, 40, 40)])[0].track_id
    assert tracker.predictions(1) == [(100, 100, 40, 40)]
    tracker.follow(1, [(104, 100, 40, 40)])
    assert tracker.predictions(2) == [(106, 100, 40, 40)]  # moved on at half its last step (the velocity's mean)
    assert [f.track_id for f in tracker.follow(2, [(108, 100, 40, 40), (400, 100, 40, 40)], [True, True])] == \
        [first, UNTRACKED]  # the far hinted face starts nothing
    for frame in (3, 4, 5):  # found only where hinted: the track lives on its last confident face, frame 1
        assert tracker.follow(frame, [(108 + 4 * frame, 100, 40, 40)], [True])[0].track_id == first
    assert tracker.follow(6, [(130, 100, 40, 40)], [True])[0].track_id == UNTRACKED
    assert tracker.predictions(6) == []


def test_a_hinted_face_with_no_track_is_not_reported_and_a_followed_one_is() -> None:
    from aitax.pipeline.ingest_detect import Detected, FaceRecords, FoundFace
    from aitax.pipeline.stream import Frame

    records = FaceRecords(tracks=StreamTracks())

    def frame(index: int, *found: FoundFace) -> list[FaceMessage]:
        shown = Frame("s", index, np.zeros((540, 960, 3), np.uint8), 0, 0, 0.0, 0.0, 0)
        return [decode_face(r.value, r.headers) for r in records.publish(Detected(shown, found, "run", 0, 0)).records]

    assert records.hints(Frame("s", 0, np.zeros((1, 1, 3), np.uint8), 0, 0, 0.0, 0.0, 0)) == []
    assert len(frame(0, FoundFace((100, 100, 40, 40), 0.99, b"png", "png"))) == 1
    assert records.hints(Frame("s", 1, np.zeros((1, 1, 3), np.uint8), 0, 0, 0.0, 0.0, 0)) == [(100, 100, 40, 40)]
    sent = frame(1, FoundFace((102, 100, 40, 40), 0.6, b"png", "png", hinted=True),
                 FoundFace((500, 100, 40, 40), 0.6, b"png", "png", hinted=True))
    assert [(m.meta.box, m.meta.faces_in_frame) for m in sent] == [((102, 100, 40, 40), 1)]


def test_a_face_that_starts_its_track_is_looked_for_in_the_frames_before_and_reported_there_late() -> None:
    """MTCNN's first confident look at a face often comes frames after the face came into view: a new track's face is
    looked for in the stream's earlier frames (the look faked here; `FaceDetector.look` is MTCNN's, tested with
    the detector), each where it was a frame later, until it is not there or a face was reported there already."""
    from aitax.pipeline.ingest_detect import Detected, EarlierFrames, FaceRecords, FoundFace
    from aitax.pipeline.stream import Frame
    from aitax.telemetry.timing import Stopwatch

    there = {1: (96, 100, 40, 40), 2: (98, 100, 40, 40), 3: (99, 100, 40, 40)}  # frame 0: not yet in view
    looked: list[tuple[int, tuple]] = []

    def look(rgb: np.ndarray, box: tuple, watch: Stopwatch) -> tuple | None:
        index = int(rgb[0, 0, 0])  # the test's frames carry their index in their first pixel
        looked.append((index, box))
        return there.get(index)

    records, earlier = FaceRecords(tracks=StreamTracks()), EarlierFrames(look)
    frames = [Frame("s", index, np.full((4, 4, 3), index, np.uint8), 0, 0, 0.0, 0.0, 0) for index in range(6)]
    faces = {4: [FoundFace((100, 100, 40, 40), 0.99, b"png", "png")],
             5: [FoundFace((102, 100, 40, 40), 0.99, b"png", "png"),
                 FoundFace((300, 100, 40, 40), 0.99, b"png", "png")]}
    sent = []
    for frame in frames:
        sent.append([decode_face(r.value, r.headers).meta for r in records.publish(
            Detected(frame, faces.get(frame.index, []), "run", 0, 0, earlier, Stopwatch())).records])
        earlier.keep(frame)
    first, late = sent[4][0], sent[4][1:]
    assert [(m.frame_index, m.box, m.track_id, m.encoding) for m in late] == \
        [(3, there[3], first.track_id, TRACKED), (2, there[2], first.track_id, TRACKED),
         (1, there[1], first.track_id, TRACKED)]
    # each frame looked at where the face was a frame later, down to the frame it was not in
    assert looked[:4] == [(3, (100, 100, 40, 40)), (2, there[3]), (1, there[2]), (0, there[1])]
    # the second face of frame 5 starts a track too: frame 4 shows nothing there (the look says so)
    assert len(sent[5]) == 2 and looked[4][0] == 4
    looked.clear()
    there[5] = (300, 100, 40, 40)  # a new track's face found where a face was reported already: not reported twice
    frame = Frame("s", 6, np.full((4, 4, 3), 6, np.uint8), 0, 0, 0.0, 0.0, 0)
    again = records.publish(Detected(frame, [FoundFace((600, 300, 40, 40), 0.99, b"png", "png")], "run", 0, 0,
                                     earlier, Stopwatch())).records
    assert len(again) == 1 and looked == [(5, (600, 300, 40, 40))]


def test_the_detect_loop_counts_only_the_faces_its_publication_reports() -> None:
    """A hinted face the tracks do not take is not sent, nor counted in the loop's figures or the detect event
    (Prometheus and the report's load over time read that event)."""
    from aitax.pipeline.ingest_detect import DetectStats, FaceRecords, FoundFace, detect_loop
    from aitax.pipeline.stream import Frame
    from tests.fakes import FakeProducer
    from tests.recording import RecordingSink

    shown = {0: [FoundFace((100, 100, 40, 40), 0.99, b"png", "png")],
             1: [FoundFace((102, 100, 40, 40), 0.99, b"png", "png"),
                 FoundFace((600, 300, 40, 40), 0.6, b"png", "png", hinted=True)]}  # where no track is
    frames = [Frame("s", index, np.zeros((540, 960, 3), np.uint8), 0, 0, 0.0, 0.0, 0) for index in (0, 1)]
    hints: list = []

    def find_faces(rgb, watch, **inputs) -> list[FoundFace]:
        hints.append(list(inputs.get("hints", ())))
        return shown[len(hints) - 1]

    producer, sink = FakeProducer(), RecordingSink()
    stats = detect_loop(frames, find_faces, producer, sink, "run", stats=DetectStats(),
                        publication=FaceRecords(tracks=StreamTracks()))
    assert hints == [[], [(100, 100, 40, 40)]]
    assert producer.sent == stats.records == 2 and stats.faces == 2
    assert [event.face_count for event in sink.events if event.stage == "detect"] == [1, 1]


def test_an_emulated_profile_with_a_thumbnail_share_sends_that_share_and_identifies_only_those(tmp_path) -> None:
    import random

    from aitax.emulation.profile import load_profile, paper_profile
    from aitax.emulation.workers import EmulatedFaceFinder, EmulatedIdentifier
    from aitax.telemetry.timing import Stopwatch

    profile = replace(paper_profile(), thumbnail_share=0.25)
    path = tmp_path / "sampled.yaml"
    path.write_text(profile.to_yaml())
    assert load_profile(str(path)).thumbnail_share == 0.25
    finder = EmulatedFaceFinder(profile, 1000.0, random.Random(3))
    faces = [face for _ in range(400) for face in finder(np.zeros((1, 1, 3), np.uint8), Stopwatch())]
    tracked = [face for face in faces if face.encoding == TRACKED]
    assert 0.65 < len(tracked) / len(faces) < 0.85 and all(not face.thumbnail for face in tracked)
    assert len({face.track_id for face in faces}) == len(faces)  # a face of a track of its own: keyed as spread
    identifier = EmulatedIdentifier(profile, 1.0, random.Random(3))
    watch = Stopwatch()
    identifier([_face(encoding=TRACKED, thumbnail=b"")] * 4, watch)
    assert "emulated" not in watch.with_other(0.0)  # tracked faces cost no emulated inference


def test_a_stretch_after_a_change_of_person_is_named_on_its_own_even_without_a_fall_in_evidence() -> None:
    """A stranger seen once, then (the same track) someone enrolled: the track's evidence never falls (1, 1, 2),
    but the change of person is in the record."""
    gallery, rng = _gallery(), np.random.default_rng(5)
    names = TrackNames(gallery)
    stranger = np.zeros(16, np.float32)
    stranger[7] = 1.0
    answers = [names.name(("r", "s", 4), stranger), names.name(("r", "s", 4), _look(0, 0.05, rng)),
               names.name(("r", "s", 4), _look(0, 0.05, rng))]
    assert [(m.evidence_frames, m.track_stretch) for m in answers] == [(1, 0), (1, 1), (2, 1)]
    identities = [replace(_identity(frame, 4, match.identity, match.evidence_frames),
                          track_stretch=match.track_stretch) for frame, match in enumerate(answers)]
    assert [i.identity for i in named_by_track(identities)] == [UNKNOWN, "alice", "alice"]


def test_a_streams_new_tracks_take_the_partitions_in_turn_and_keep_theirs() -> None:
    lanes = TrackLanes(12)
    first = [lanes.partition("cam-1", track) for track in (100, 101, 700, 1500)]
    assert [(lane - first[0]) % 12 for lane in first] == [0, 1, 2, 3]  # the tracks on screen together spread
    assert lanes.partition("cam-1", 101) == first[1]  # a track's faces stay on its partition
    dealt = [lanes.partition("cam-2", track) for track in range(24)]
    assert sorted(dealt) == sorted(list(range(12)) * 2)  # another stream goes round them all too
    with pytest.raises(ValueError, match="0 partitions"):
        TrackLanes(0)


def test_a_track_keyed_face_goes_to_its_tracks_partition_and_an_untracked_one_by_its_key() -> None:
    from aitax.pipeline.ingest_detect import Detected, FaceRecords, FoundFace
    from aitax.pipeline.stream import Frame

    frame = Frame("cam-1", 0, np.zeros((4, 4, 3), np.uint8), 1, 2, 0.0, 0.0, 0)
    found = [FoundFace((0, 0, 40, 40), 0.99, b"png", "png"), FoundFace((200, 0, 40, 40), 0.99, b"png", "png")]
    dealt = FaceRecords("track", StreamTracks(lanes=TrackLanes(12))).publish(Detected(frame, found, "r", 3, 4)).records
    assert (dealt[1].partition - dealt[0].partition) % 12 == 1
    hashed = FaceRecords("face", StreamTracks(lanes=TrackLanes(12))).publish(Detected(frame, found, "r", 3, 4)).records
    untracked = FaceRecords("track").publish(Detected(frame, found, "r", 3, 4)).records
    assert [record.partition for record in hashed + untracked] == [None] * 4
