"""Frames from the ingest process to detection through shared memory, not pickled through a pipe.

A 960x540 frame and the 1080p picture its thumbnails are cut from are 7.7 MB: through a `multiprocessing.Queue`
that took 17 ms a frame on an idle machine here (pickled, written and read through the pipe in 64 kB pieces,
unpickled), 10.7-16.6 ms p50 of each face's end to end in a run. Here the ingest process copies the pixels into one
of a ring of shared-memory slots and the queue carries the slot's number; detection reads the pixels where they lie.

A slot is written again only once detection is done with the frame it held: with a queue of Q frames, the ingest
process has put frame n only when at most Q frames were waiting, so detection has taken every frame up to n - Q
and finished all but the one it holds; a ring of Q + 2 slots never reaches a frame in use. Detection's process
makes the slots, sized for a video file's frames, before it starts ingestion, and removes them when ingestion has
ended. A camera's frames (their size is known only once it answers), a frame larger than a slot, and every frame
where /dev/shm has not room for twice the ring (a container's 64 MB) go through the pipe as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from aitax.pipeline.stream import BoundedQueue, Frame

SHM_FOLDER = "/dev/shm"
NO_PIXELS = np.zeros((0, 0, 3), np.uint8)


@dataclass(frozen=True)
class InSlot:
    """A frame whose pixels are in `slot` (`rgb`, then `full`); the frame itself carries none."""

    slot: int
    frame: Frame
    rgb_shape: tuple[int, ...]
    full_shape: tuple[int, ...] | None


def frame_bytes(size: tuple[int, int], source_size: tuple[int, int]) -> int:
    """A frame resized to `size` (width, height), with its picture at `source_size` where that is wider."""
    width, height = size
    source_width, source_height = source_size
    return 3 * (width * height + (source_width * source_height if source_width > width else 0))


def room_for(nbytes: int) -> bool:
    try:
        stats = os.statvfs(SHM_FOLDER)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize >= 2 * nbytes


class FrameSlots:
    """The ring: made by detection's process (`create`), mapped by the ingest process (`attach`)."""

    def __init__(self, memory: list[shared_memory.SharedMemory], owner: bool) -> None:
        self.memory, self.owner = memory, owner

    @classmethod
    def create(cls, queue_size: int, nbytes: int) -> FrameSlots | None:
        """Q + 2 slots of `nbytes`; None where /dev/shm has not room for twice that."""
        count = queue_size + 2
        if nbytes <= 0 or not room_for(count * nbytes):
            return None
        return cls([shared_memory.SharedMemory(create=True, size=nbytes) for _ in range(count)], owner=True)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(slot.name for slot in self.memory)

    @classmethod
    def attach(cls, names: tuple[str, ...]) -> FrameSlots:
        # A spawned child shares its parent's resource tracker, where the slots are registered once: mapping them
        # registers nothing new, and unregistering here would unregister the owner's.
        return cls([shared_memory.SharedMemory(name) for name in names], owner=False)

    def write(self, slot: int, frame: Frame) -> InSlot | None:
        """The frame's pixels copied into `slot`; None when they do not fit (the frame goes as it is)."""
        buffer, full = self.memory[slot].buf, frame.full
        if frame.rgb.nbytes + (full.nbytes if full is not None else 0) > len(buffer):
            return None
        np.frombuffer(buffer, np.uint8, frame.rgb.size)[:] = frame.rgb.ravel()
        if full is not None:
            np.frombuffer(buffer, np.uint8, full.size, frame.rgb.nbytes)[:] = full.ravel()
        return InSlot(slot, replace(frame, rgb=NO_PIXELS, full=None), frame.rgb.shape,
                      None if full is None else full.shape)

    def read(self, item: InSlot) -> Frame:
        """The frame, its pixels viewed where they lie (valid until the ring comes round to its slot again)."""
        buffer = self.memory[item.slot].buf
        rgb = np.frombuffer(buffer, np.uint8, int(np.prod(item.rgb_shape))).reshape(item.rgb_shape)
        full = None if item.full_shape is None else np.frombuffer(
            buffer, np.uint8, int(np.prod(item.full_shape)), rgb.nbytes).reshape(item.full_shape)
        return replace(item.frame, rgb=rgb, full=full)

    def close(self) -> None:
        for slot in self.memory:
            try:
                slot.close()
            except BufferError:  # a frame still viewed (a traceback's): its mapping goes with the last view
                slot._buf = slot._mmap = None  # type: ignore[attr-defined]
            if self.owner:
                slot.unlink()


class SlotQueue:
    """The ingest process's `BoundedQueue`: a frame goes as its slot, its pixels copied into the ring."""

    def __init__(self, frames: BoundedQueue, slots: FrameSlots) -> None:
        self.frames, self.slots = frames, slots
        self.sent = 0  # frames put through the ring: the next one goes to slot sent % len(ring)
        self._written: tuple[Frame, InSlot | None] | None = None  # the frame last copied in, not yet put

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        packed = None
        if isinstance(item, Frame):
            # a frame retried while the queue is full (detection behind) is copied in once, not at every retry
            if self._written is None or self._written[0] is not item:
                self._written = (item, self.slots.write(self.sent % len(self.slots.memory), item))
            packed = self._written[1]
        self.frames.put(item if packed is None else packed, block, timeout)
        if packed is not None:
            self.sent += 1  # only once put: a frame that found the queue full leaves its slot to the next
            self._written = None
