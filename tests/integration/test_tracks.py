"""Tracks through the real pipeline: ingest-detect follows faces and sends a sample of each track's thumbnails,
identify names tracks from their evidence, and an identify consumer killed mid-track loses nothing and its tracks
regain their names on the consumer that takes their partitions. Real models, real brokers, the CLI a user runs."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.schema import UNKNOWN, UNTRACKED
from pipeline.transport.readback import read_face_topic, read_identities
from stack.config import StackConfig

pytestmark = pytest.mark.integration
AITAX = [sys.executable, "-m", "aitax.cli"]
SAMPLE_EVERY = 5
# A moved track's faces reach a consumer with no evidence: its `tracked` faces are unknown until the next thumbnail
# (at most SAMPLE_EVERY frames), which names it again: the bound stated in docs/tracks.md.
REGAINED_WITHIN = 2 * SAMPLE_EVERY


def _identify(gallery: Path, run_id: str, status: Path) -> subprocess.Popen:
    return subprocess.Popen([*AITAX, "identify", "--gallery", str(gallery), "--group", f"identify-{run_id}",
                             "--run-id", run_id, "--events", "none", "--metrics-port", "-1"],
                            env={**os.environ, "AITAX_STATUS_FILE": str(status)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _ready(status: Path) -> bool:
    return status.exists() and any(json.loads(line)["state"] == "ready" for line in status.read_text().splitlines())


def test_a_killed_identify_consumer_loses_no_face_and_its_tracks_regain_their_names(
        stack: StackConfig, gallery: Path, video: Path, tmp_path: Path, unique_name: str) -> None:
    consumers = [_identify(gallery, unique_name, tmp_path / f"identify-{n}.status") for n in range(2)]
    try:
        deadline = time.monotonic() + 300
        while not all(_ready(tmp_path / f"identify-{n}.status") for n in range(2)):
            assert time.monotonic() < deadline, "identify never got its partitions"
            assert all(c.poll() is None for c in consumers), consumers[0].stderr.read()[-2000:]
            time.sleep(0.5)
        ingest = subprocess.Popen([*AITAX, "ingest-detect", "--video", str(video), "--stream-id", "cam-track",
                                   "--run-id", unique_name, "--send", f"sample:{SAMPLE_EVERY}", "--events", "none",
                                   "--metrics-port", "-1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(5)  # the 12 s video at its own pace: tracks are under way
        consumers[0].send_signal(signal.SIGKILL)
        consumers[0].wait()
        out, err = ingest.communicate(timeout=300)
        assert ingest.returncode == 0, err[-2000:]
        assert "with their thumbnail" in out
        sent = read_face_topic(stack.bootstrap_servers, "faces", unique_name).faces
        deadline = time.monotonic() + 180  # the group notices the dead member after its session timeout
        identities: list = []
        while time.monotonic() < deadline:
            identities, _ = read_identities(stack.bootstrap_servers, unique_name)
            if len(identities) >= len(sent):
                break
            time.sleep(2)
    finally:
        for consumer in consumers:
            if consumer.poll() is None:
                consumer.send_signal(signal.SIGTERM)
                consumer.wait(60)

    # Nothing acknowledged is lost: every face in the topic has its identity, tracked or not.
    assert len(sent) > 30
    assert {i.key for i in identities} == sent
    tracked = [i for i in identities if i.track_id != UNTRACKED]
    assert len(tracked) == len(identities)
    by_track: dict[int, list] = {}
    for identity in sorted(identities, key=lambda i: i.frame_index):
        by_track.setdefault(identity.track_id, []).append(identity)
    # The kill moved tracks mid-way: their evidence started again on the other consumer (a drop in evidence) ...
    moved = {track: faces for track, faces in by_track.items()
             if any(b.evidence_frames < a.evidence_frames for a, b in itertools.pairwise(faces))}
    assert moved, "no track was under way when its consumer was killed"
    # ... and each that was named before the move is named again within the stated number of frames. (A drop that
    # names someone else is the track changing person, as a tracker may at a crossing: not a move.)
    checked = 0
    for track, faces in moved.items():
        move = next(n for n, (a, b) in enumerate(itertools.pairwise(faces), 1)
                    if b.evidence_frames < a.evidence_frames)
        before, after = faces[move - 1].identity, faces[move:]
        if before == UNKNOWN or any(face.identity not in (before, UNKNOWN) for face in after):
            continue
        checked += 1
        regained = next((face.frame_index for face in after if face.identity == before), None)
        if regained is None:
            assert len(after) < REGAINED_WITHIN, (track, after)
        else:
            assert regained - after[0].frame_index <= REGAINED_WITHIN, (track, after)
    assert checked, f"no named track was moved: {moved}"
