"""The edges of a node-link graph on a pyqtgraph plot, said once for the Routes and Circuits graphs.

Why buckets: a graph has thousands of candidate edges and a threshold drag redraws it many times a
second; one PlotCurveItem per edge would rebuild thousands of items. Edges are grouped into a fixed set
of curves (one per group and width bucket, created once by the plot), each drawn with
`setData(connect="pairs")`, so a redraw is a few numpy operations and a dozen setData calls. Hovering
finds the nearest edge in pixels, so the reach is the same at every zoom.
"""
from __future__ import annotations

import numpy as np


def segment_ends(x: np.ndarray, y: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each edge's start and end points, (E, 2) each, from the nodes' x and y."""
    xy0 = np.stack([x[src], y[src]], axis=1) if len(src) else np.zeros((0, 2))
    xy1 = np.stack([x[dst], y[dst]], axis=1) if len(dst) else np.zeros((0, 2))
    return xy0, xy1


def draw_buckets(buckets: dict, xy0: np.ndarray, xy1: np.ndarray, group: np.ndarray, bucket: np.ndarray) -> None:
    """Give each curve of `buckets`, keyed (group, width bucket), the edges of its group and bucket
    (`group`, `bucket`: one value per edge); a curve with none is emptied."""
    for (g, b), item in buckets.items():
        keep = (bucket == b) & (group == g)
        if not keep.any():
            item.setData([], [])
            continue
        xs = np.stack([xy0[keep, 0], xy1[keep, 0]], axis=1).ravel()
        ys = np.stack([xy0[keep, 1], xy1[keep, 1]], axis=1).ravel()
        item.setData(xs, ys, connect="pairs")


def pointer_in_pixels(plot, scene_pos) -> tuple[np.ndarray, np.ndarray]:
    """The pointer in pixels from the plot's data origin, and the pixels per data unit (x, y)."""
    vb = plot.getPlotItem().getViewBox()
    p = vb.mapSceneToView(scene_pos)
    px, py = vb.viewPixelSize()  # data units per pixel
    scale = np.array([1.0 / max(px, 1e-12), 1.0 / max(py, 1e-12)])
    return np.array([p.x(), p.y()]) * scale, scale


def nearest_segment(xy0: np.ndarray, xy1: np.ndarray, q: np.ndarray, scale: np.ndarray) -> tuple[int, float]:
    """The edge (index) nearest the point `q` (pixels) and its distance in pixels; edges non-empty."""
    a, b = xy0 * scale, xy1 * scale  # (E, 2) in pixels
    ab = b - a
    t = np.clip(((q - a) * ab).sum(1) / np.maximum((ab * ab).sum(1), 1e-12), 0.0, 1.0)
    d = np.hypot(*(a + t[:, None] * ab - q).T)
    best = int(np.argmin(d))
    return best, float(d[best])
