"""Frames from the ingest process to detection through shared-memory slots: the same pixels arrive, a slot is never
written while detection may still read it, and whatever does not fit goes through the queue as before."""

from __future__ import annotations

import multiprocessing
import queue
import time

import numpy as np
import pytest

from aitax.pipeline import frame_slots
from aitax.pipeline.frame_slots import FrameSlots, InSlot, SlotQueue, frame_bytes
from aitax.pipeline.stream import Frame, hand_off

SIZE, SOURCE = (32, 18), (64, 36)


def _frame(index: int, full: bool = True) -> Frame:
    value = index % 251
    return Frame("cam", index, np.full((SIZE[1], SIZE[0], 3), value, np.uint8), 1, time.time_ns(), 0.5, 0.25, 2,
                 full=np.full((SOURCE[1], SOURCE[0], 3), value, np.uint8) if full else None)


def test_a_frame_crosses_as_its_slot_and_reads_back_the_same() -> None:
    slots = FrameSlots.create(2, frame_bytes(SIZE, SOURCE))
    try:
        ring, frames = SlotQueue(queue.Queue(2), slots), []
        for index in range(6):  # round the ring of 4 once and a half
            ring.put(_frame(index, full=index != 3))
            item = ring.frames.get()
            assert isinstance(item, InSlot) and item.slot == index % 4 and item.frame.rgb.size == 0
            frames.append(slots.read(item))
            assert frames[-1].rgb[0, 0, 0] == index and frames[-1].stream_id == "cam"
            assert (frames[-1].full is None) == (index == 3)
        assert frames[-1].full.shape == (SOURCE[1], SOURCE[0], 3) and frames[-1].decode_ms == 0.5
    finally:
        slots.close()


def test_what_does_not_fit_goes_as_it_is_and_no_room_means_no_slots(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path) -> None:
    slots = FrameSlots.create(2, frame_bytes(SIZE, SIZE))  # slots for frames without their larger picture
    try:
        ring = SlotQueue(queue.Queue(2), slots)
        ring.put(_frame(1))
        assert isinstance(ring.frames.get(), Frame) and ring.sent == 0
        ring.put("end")
        assert ring.frames.get() == "end"
    finally:
        slots.close()
    monkeypatch.setattr(frame_slots, "SHM_FOLDER", str(tmp_path / "no-shm-here"))
    assert FrameSlots.create(2, 1000) is None


def _ingest(frames: multiprocessing.Queue, names: tuple[str, ...], count: int) -> None:
    ring = SlotQueue(frames, FrameSlots.attach(names))
    for index in range(count):
        hand_off(ring, _frame(index), lambda: False)
    frames.put(None)


def test_a_slow_detection_never_sees_a_frame_overwritten() -> None:
    context = multiprocessing.get_context("spawn")
    frames = context.Queue(3)
    slots = FrameSlots.create(3, frame_bytes(SIZE, SOURCE))
    ingest = context.Process(target=_ingest, args=(frames, slots.names, 40))
    ingest.start()
    try:
        seen = []
        while (item := frames.get(timeout=30)) is not None:
            frame = slots.read(item)
            time.sleep(0.01)  # slower than ingestion: the ring is full all the time
            assert frame.rgb.min() == frame.rgb.max() == frame.full.max() == frame.index % 251
            seen.append(frame.index)
        assert seen == list(range(40))
    finally:
        ingest.join(10)
        slots.close()


def test_a_frame_retried_while_the_queue_is_full_is_copied_in_once(monkeypatch: pytest.MonkeyPatch) -> None:
    slots = FrameSlots.create(1, frame_bytes(SIZE, SOURCE))
    try:
        written = []
        write = slots.write
        monkeypatch.setattr(slots, "write", lambda slot, frame: written.append(slot) or write(slot, frame))
        ring = SlotQueue(queue.Queue(1), slots)
        ring.put(_frame(0))
        waiting = _frame(1)
        for _ in range(3):  # detection behind: the queue stays full
            with pytest.raises(queue.Full):
                ring.put(waiting, block=False)
        assert slots.read(ring.frames.get()).index == 0
        ring.put(waiting, block=False)
        assert written == [0, 1] and slots.read(ring.frames.get()).rgb[0, 0, 0] == 1
    finally:
        slots.close()
