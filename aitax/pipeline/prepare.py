"""MTCNN's network inputs without TensorFlow: the pyramid PNet scans and the patches RNet and ONet refine.

TensorFlow's area resize walks every source pixel for every pyramid level, and each eager or graph call on the
frame copies it into a tensor: that preparation took as much of the detect process as PNet did. Here:
- **The pyramid** is read off one integral image of the uint8 frame. An area-resized pixel is the frame's mean over
  its cell; the frame's integral over [0, y) x [0, x) is bilinear between the integral image's grid points, so a
  cell's sum is four bilinear reads and each level costs work in proportion to its own size.
- **The patches** are bilinear samples of the uint8 frame, with TF's crop_and_resize geometry.
Both normalise as the package does and agree with TensorFlow's ops on the normalised frame to 1e-4
(tests/unit/test_detect.py). The kernels are compiled by Numba on first use and run on the calling thread.
"""

from __future__ import annotations

import cv2
import numba
import numpy as np

MTCNN_MEAN, MTCNN_SCALE = 127.5, 1 / 128  # the package's normalisation: uint8 [0, 255] -> float32 [-1, 1)


@numba.njit(nogil=True)
def _area_level(table: np.ndarray, out: np.ndarray) -> None:
    """out (h, w, 3): the normalised mean of the frame over each of its cells, as TF's area resize computes it,
    from the frame's (H+1, W+1, 3) integral image: the integral along each cell edge's row (one contiguous pass over
    two table rows), then at each cell corner's column. The three channels are spelled out: a loop over them ran at
    half the speed."""
    frame_h, frame_w = table.shape[0] - 1, table.shape[1] - 1
    out_h, out_w = out.shape[0], out.shape[1]
    scale_y, scale_x = frame_h / out_h, frame_w / out_w
    x_index = np.empty(out_w + 1, np.int64)
    x_frac = np.empty(out_w + 1, np.float64)
    for j in range(out_w + 1):
        position = min(j * scale_x, float(frame_w))
        x_index[j] = min(int(position), frame_w - 1)
        x_frac[j] = position - x_index[j]
    flat = table.reshape(frame_h + 1, (frame_w + 1) * 3)
    out_rows = out.reshape(out_h, out_w * 3)
    edge_row = np.empty((frame_w + 1) * 3, np.float64)  # the integral along one cell edge's row, (x, channel) flat
    above = np.empty((out_w + 1) * 3, np.float64)  # the integral at the cells' top corners
    below = np.empty((out_w + 1) * 3, np.float64)  # and at their bottom corners
    norm = 1.0 / (scale_y * scale_x)
    for i in range(out_h + 1):
        position = min(i * scale_y, float(frame_h))
        row = min(int(position), frame_h - 1)
        fy = position - row
        upper, lower = flat[row], flat[row + 1]
        for k in range(edge_row.shape[0]):
            edge_row[k] = upper[k] + fy * (lower[k] - upper[k])
        for j in range(out_w + 1):
            left, fx = x_index[j] * 3, x_frac[j]
            red, green, blue = edge_row[left], edge_row[left + 1], edge_row[left + 2]
            below[j * 3] = red + fx * (edge_row[left + 3] - red)
            below[j * 3 + 1] = green + fx * (edge_row[left + 4] - green)
            below[j * 3 + 2] = blue + fx * (edge_row[left + 5] - blue)
        if i > 0:
            target = out_rows[i - 1]
            for k in range(out_w * 3):  # contiguous: vectorised
                area = below[k + 3] - below[k] - above[k + 3] + above[k]
                target[k] = (area * norm - MTCNN_MEAN) * MTCNN_SCALE
        above, below = below, above


def area_pyramid(frame: np.ndarray, sizes: tuple[tuple[int, int], ...]) -> list[np.ndarray]:
    """PNet's inputs: the uint8 (H, W, 3) frame area-resized to each (height, width) and normalised, as
    (1, h, w, 3) float32 arrays."""
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise ValueError(f"frame {frame.shape} {frame.dtype}: MTCNN takes uint8 RGB (H, W, 3)")
    table = cv2.integral(frame, sdepth=cv2.CV_32S)  # uint8 sums of a 1080p frame stay below 2**31
    levels = []
    for height, width in sizes:
        level = np.empty((1, height, width, 3), np.float32)
        _area_level(table, level[0])
        levels.append(level)
    return levels


@numba.njit(nogil=True)
def _crop_resize(frame: np.ndarray, boxes: np.ndarray, out: np.ndarray) -> None:
    """TF's crop_and_resize (bilinear, extrapolating the package's 0) of each box's corners divided by the frame's
    size, as the package divides them, sampled from the uint8 frame and normalised."""
    height, width, channels = frame.shape
    size = out.shape[1]
    left = np.empty(size, np.int64)
    x_frac = np.empty(size, np.float64)
    for n in range(boxes.shape[0]):
        # The package's normalised corners, mapped back as crop_and_resize maps them: onto [0, size - 1].
        y1, x1 = boxes[n, 1] / height * (height - 1), boxes[n, 0] / width * (width - 1)
        y2, x2 = boxes[n, 3] / height * (height - 1), boxes[n, 2] / width * (width - 1)
        step_y, step_x = (y2 - y1) / (size - 1), (x2 - x1) / (size - 1)
        for j in range(size):
            in_x = x1 + j * step_x
            left[j] = int(np.floor(in_x)) if 0 <= in_x <= width - 1 else -1  # -1: outside, sampled as 0
            x_frac[j] = in_x - np.floor(in_x)
        for i in range(size):
            in_y = y1 + i * step_y
            if in_y < 0 or in_y > height - 1:
                out[n, i] = 0.0
                continue
            top = int(np.floor(in_y))
            bottom = min(top + 1, height - 1)
            fy = in_y - top
            for j in range(size):
                x = left[j]
                if x < 0:
                    out[n, i, j] = 0.0
                    continue
                right = min(x + 1, width - 1)
                fx = x_frac[j]
                for c in range(channels):
                    upper = frame[top, x, c] + (np.float64(frame[top, right, c]) - frame[top, x, c]) * fx
                    lower = frame[bottom, x, c] + (np.float64(frame[bottom, right, c]) - frame[bottom, x, c]) * fx
                    out[n, i, j, c] = (upper + (lower - upper) * fy - MTCNN_MEAN) * MTCNN_SCALE


def patches(frame: np.ndarray, boxes: np.ndarray, size: int) -> np.ndarray:
    """RNet's (24) or ONet's (48) inputs: for each box (x1, y1, x2, y2 in frame pixels) a size x size normalised
    bilinear sample of the uint8 (H, W, 3) frame, 0 outside it: (n, size, size, 3) float32."""
    out = np.empty((len(boxes), size, size, frame.shape[2]), np.float32)
    _crop_resize(frame, np.ascontiguousarray(boxes, dtype=np.float64), out)
    return out
