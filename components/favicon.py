"""The browser-tab icon, drawn here and shipped as assets/favicon.png (``python -m components.favicon`` rewrites it).

Streamlit turns a Material-symbol page icon into a request to Google's font CDN, so a classroom server without
internet showed no tab icon, and every visit told a third party which page was open. A local PNG is served by the
app itself. The icon: a blue rounded tile in the theme's primary colour with a white curve that falls and levels
off, as a loss curve does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.registry import ROOT

PATH = ROOT / "assets" / "favicon.png"
SIZE = 64
PRIMARY = (0x3B, 0x6F, 0xD8)   # .streamlit/config.toml [theme] primaryColor


def _segment_distance(px: np.ndarray, py: np.ndarray, a: tuple[float, float], b: tuple[float, float]) -> np.ndarray:
    """Euclidean distance of each pixel centre to the segment a-b."""
    ax, ay = a
    dx, dy = b[0] - ax, b[1] - ay
    t = np.clip(((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy), 0.0, 1.0)
    return np.hypot(px - ax - t * dx, py - ay - t * dy)


def draw(size: int = SIZE) -> np.ndarray:
    """RGBA uint8 image (size x size x 4), anti-aliased by coverage from signed distances."""
    s = size / 64.0
    y, x = np.mgrid[0:size, 0:size] + 0.5
    # rounded square: signed distance to a square of half-width 30 with corner radius 12 (in 64-px units)
    half, r = 30 * s, 12 * s
    qx, qy = np.abs(x - size / 2) - (half - r), np.abs(y - size / 2) - (half - r)
    tile = np.hypot(np.maximum(qx, 0), np.maximum(qy, 0)) + np.minimum(np.maximum(qx, qy), 0) - r
    tile_cov = np.clip(0.5 - tile, 0.0, 1.0)
    # the curve as a polyline: image row 48 - 32 exp(-(x - 12) / 9), rows growing downwards, so it starts near the
    # top at x = 12 and falls towards row 48; stroke half-width 3.2
    xs = np.linspace(12, 52, 24) * s
    ys = (48 - 32 * np.exp(-(xs / s - 12) / 9.0)) * s
    d = np.full(x.shape, np.inf)
    for i in range(len(xs) - 1):
        d = np.minimum(d, _segment_distance(x, y, (xs[i], ys[i]), (xs[i + 1], ys[i + 1])))
    line_cov = np.clip(3.2 * s + 0.5 - d, 0.0, 1.0) * tile_cov
    rgb = np.empty((size, size, 3))
    for c in range(3):
        rgb[..., c] = PRIMARY[c] * (1 - line_cov) + 255 * line_cov
    out = np.dstack([rgb, 255 * tile_cov])
    return np.round(out).astype(np.uint8)


def write(path: Path = PATH) -> Path:
    from PIL import Image

    Image.fromarray(draw(), "RGBA").save(path, optimize=True)
    return path


if __name__ == "__main__":
    print(write())
