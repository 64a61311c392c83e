"""The message schema: what encodes decodes back, and every kind of bad record gets a reason."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from aitax.pipeline.schema import (
    META_HEADER,
    SCHEMA_HEADER,
    UNKNOWN,
    FaceMessage,
    FaceMeta,
    IdentityMessage,
    MalformedRecordError,
    Match,
    dead_letter_headers,
    decode_face,
    decode_identity,
    encode_face,
    encode_identity,
)


def _face() -> FaceMessage:
    meta = FaceMeta(run_id="r", stream_id="cam-2", frame_index=41, face_index=1, faces_in_frame=2,
                    box=(10, 20, 64, 80), confidence=0.99, encoding="jpeg", scheduled_ns=0, captured_ns=1,
                    ingested_ns=2,
                    detect_start_ns=3, detected_ns=4, produced_ns=5)
    return FaceMessage(meta, b"\xff\xd8thumbnail")


def test_face_round_trip_and_keying() -> None:
    key, value, headers = encode_face(_face())
    assert key == b"cam-2/41/1"  # the default: every face on its own
    assert value == b"\xff\xd8thumbnail"
    assert decode_face(value, headers) == _face()
    assert encode_face(_face(), "none")[0] is None
    assert encode_face(_face(), "frame")[0] == b"cam-2/41"
    assert encode_face(_face(), "stream")[0] == b"cam-2"
    with pytest.raises(ValueError, match="keying 'camera'"):
        encode_face(_face(), "camera")


def _answer(match: Match):
    return IdentityMessage.answering(_face().meta, match, appended_ns=5, requested_ns=6, fetched_ns=7,
                                     identify_start_ns=10, identified_ns=11, batch_size=3)


def test_identity_answers_its_face() -> None:
    identity = _answer(Match(UNKNOWN, 0.31234, "alice"))
    assert identity.key == _face().key
    assert (identity.identity, identity.score, identity.candidate) == (UNKNOWN, 0.3123, "alice")
    assert decode_identity(encode_identity(identity)[1]) == replace(identity, delivered_ns=11)
    assert (identity.box, identity.detected_ns, identity.appended_ns, identity.requested_ns, identity.fetched_ns,
            identity.identify_start_ns, identity.identified_ns, identity.batch_size) == \
        ((10, 20, 64, 80), 4, 5, 6, 7, 10, 11, 3)


def test_an_identity_is_delivered_when_the_brokers_appended_it_never_before_it_was_made() -> None:
    identity = _answer(Match("alice", 0.9, "alice"))
    value = encode_identity(identity)[1]
    assert "delivered_ns" not in json.loads(value)  # the sender cannot know it: the reader sets it
    assert decode_identity(value, appended_ms=7).delivered_ns == 7_000_000
    assert decode_identity(value, appended_ms=0).delivered_ns == identity.identified_ns


def test_a_version_1_identity_still_reads_without_a_candidate_or_a_split_wait() -> None:
    current = json.loads(encode_identity(_answer(Match("alice", 0.9, "alice")))[1])
    del current["candidate"]
    for name in ("appended_ns", "requested_ns", "fetched_ns", "batch_size"):
        del current[name]
    old = decode_identity(json.dumps({**current, "schema_version": 1}).encode())
    assert (old.identity, old.candidate, old.schema_version) == ("alice", "", 1)
    assert old.appended_ns == old.requested_ns == old.fetched_ns == old.identify_start_ns  # all of it: produce


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda h, v: (h.pop(SCHEMA_HEADER), v)[1], "missing header aitax.schema"),
    (lambda h, v: (h.update({SCHEMA_HEADER: b"9"}), v)[1], "schema version"),
    (lambda h, v: (h.update({META_HEADER: b"{not json"}), v)[1], "not JSON"),
    (lambda h, v: (h.update({META_HEADER: b"[1, 2]"}), v)[1], "not a JSON object"),
    (lambda h, v: b"", "empty thumbnail"),
    (lambda h, v: b"x" * (1024 * 1024 + 1), "exceeds"),
])
def test_malformed_records_say_why(mutate, reason: str) -> None:
    _, value, headers = encode_face(_face())
    value = mutate(headers, value)
    with pytest.raises(MalformedRecordError, match=reason):
        decode_face(value, headers)


@pytest.mark.parametrize(("field", "bad", "reason"), [
    ("frame_index", "41", "field frame_index"),
    ("frame_index", True, "field frame_index"),
    ("box", [1, 2, 0, 5], "positive size"),
    ("box", [1, 2, 3], "positive size"),
    ("encoding", "gif", "field encoding"),
])
def test_bad_fields_are_named(field: str, bad, reason: str) -> None:
    _, value, headers = encode_face(_face())
    meta = json.loads(headers[META_HEADER])
    meta[field] = bad
    headers[META_HEADER] = json.dumps(meta).encode()
    with pytest.raises(MalformedRecordError, match=reason):
        decode_face(value, headers)


def test_missing_field_is_named() -> None:
    _, value, headers = encode_face(_face())
    meta = json.loads(headers[META_HEADER])
    del meta["detected_ns"]
    headers[META_HEADER] = json.dumps(meta).encode()
    with pytest.raises(MalformedRecordError, match="field detected_ns missing"):
        decode_face(value, headers)


def test_identity_round_trip() -> None:
    identity = IdentityMessage(run_id="r", stream_id="cam-1", frame_index=3, face_index=0, identity="madonna",
                               score=0.82, box=(1, 2, 3, 4), scheduled_ns=9, captured_ns=10, ingested_ns=11,
                               detect_start_ns=12, detected_ns=13, appended_ns=14, requested_ns=14, fetched_ns=14,
                               identify_start_ns=14, identified_ns=15, delivered_ns=15)
    key, value = encode_identity(identity)
    assert key == b"cam-1"
    assert decode_identity(value) == identity
    with pytest.raises(MalformedRecordError):
        decode_identity(b'{"schema_version": 99}')


def test_dead_letter_keeps_headers_and_adds_reason_and_source() -> None:
    headers = dead_letter_headers({"a": b"1"}, "bad thing", "faces", 3, 77)
    assert headers == {"a": b"1", "aitax.dlq.reason": b"bad thing", "aitax.dlq.source": b"faces/3/77"}


def _frame_record(**changes) -> tuple[bytes, dict[str, bytes]]:
    from aitax.pipeline.schema import FrameMessage, FrameMeta, encode_frame

    meta = FrameMeta(run_id="r", stream_id="cam-3", frame_index=7, width=960, height=540, encoding="jpeg",
                     scheduled_ns=1, captured_ns=2, ingested_ns=3, decode_ms=4.5, resize_ms=1.25)
    key, value, headers = encode_frame(FrameMessage(meta, b"\xff\xd8frame"))
    assert key == b"cam-3/7"  # spread frame by frame over the partitions
    assert encode_frame(FrameMessage(meta, b"\xff\xd8frame"), "stream")[0] == b"cam-3"  # in order, one partition
    raw = {**json.loads(headers[META_HEADER]), **changes}
    return value, {**headers, META_HEADER: json.dumps(raw).encode()}


def test_frame_round_trip_and_bad_frames_say_why() -> None:
    from aitax.pipeline.schema import MAX_FRAME_BYTES, decode_frame

    value, headers = _frame_record()
    message = decode_frame(value, headers)
    assert (message.meta.stream_id, message.meta.frame_index, message.meta.decode_ms) == ("cam-3", 7, 4.5)
    assert message.pixels == b"\xff\xd8frame"
    for bad, reason in ((_frame_record(width=0), "width x height=0x540 is not a frame size"),
                        (_frame_record(encoding="raw"), "encoding='raw' is not one of"),
                        (_frame_record(resize_ms="fast"), "field resize_ms='fast' has the wrong type"),
                        ((b"", headers), "empty frame"),
                        ((b"x" * (MAX_FRAME_BYTES + 1), headers), "exceeds")):
        with pytest.raises(MalformedRecordError, match=reason):
            decode_frame(*bad)
