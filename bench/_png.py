"""A PNG bar chart with the standard library alone (zlib + struct): ``bench/replay.py``'s
waits by configuration and team. matplotlib is not in the lock; this draws rectangles and
a 3x5 pixel font (digits, A-Z, ``.-/%()``; lower case drawn as upper case).

>>> c = Canvas(4, 2)
>>> c.rect(0, 0, 2, 2, (255, 0, 0))
>>> png = c.png()
>>> png[:8] == b"\\x89PNG\\r\\n\\x1a\\n", struct.unpack(">II", png[16:24])
(True, (4, 2))
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence

RGB = tuple[int, int, int]
WHITE, BLACK, GREY = (255, 255, 255), (0, 0, 0), (215, 215, 215)

# each glyph: 5 rows of 3 bits (left = 4)
FONT: dict[str, tuple[int, ...]] = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 3, 1, 7),
    "4": (5, 5, 7, 1, 1), "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 1, 2, 2),
    "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7), "A": (2, 5, 7, 5, 5), "B": (6, 5, 6, 5, 6),
    "C": (7, 4, 4, 4, 7), "D": (6, 5, 5, 5, 6), "E": (7, 4, 6, 4, 7), "F": (7, 4, 6, 4, 4),
    "G": (7, 4, 5, 5, 7), "H": (5, 5, 7, 5, 5), "I": (7, 2, 2, 2, 7), "J": (1, 1, 1, 5, 7),
    "K": (5, 5, 6, 5, 5), "L": (4, 4, 4, 4, 7), "M": (5, 7, 7, 5, 5), "N": (6, 5, 5, 5, 5),
    "O": (7, 5, 5, 5, 7), "P": (7, 5, 7, 4, 4), "Q": (7, 5, 5, 7, 1), "R": (6, 5, 6, 5, 5),
    "S": (7, 4, 7, 1, 7), "T": (7, 2, 2, 2, 2), "U": (5, 5, 5, 5, 7), "V": (5, 5, 5, 5, 2),
    "W": (5, 5, 7, 7, 5), "X": (5, 5, 2, 5, 5), "Y": (5, 5, 2, 2, 2), "Z": (7, 1, 2, 4, 7),
    ".": (0, 0, 0, 0, 2), "-": (0, 0, 7, 0, 0), "/": (1, 1, 2, 4, 4), "%": (5, 1, 2, 4, 5),
    "(": (1, 2, 2, 2, 1), ")": (4, 2, 2, 2, 4), " ": (0, 0, 0, 0, 0), ":": (0, 2, 0, 2, 0),
}  # fmt: skip


class Canvas:
    """An RGB image, white, drawn on with rectangles and text; :meth:`png` encodes it."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.px = bytearray(bytes(WHITE) * (width * height))

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: RGB) -> None:
        """Fill ``[x0, x1) x [y0, y1)`` (clipped to the image)."""
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        if x0 >= x1:
            return
        row = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            at = (y * self.width + x0) * 3
            self.px[at : at + len(row)] = row

    def text(self, x: int, y: int, s: str, color: RGB = BLACK, scale: int = 2) -> int:
        """Draw ``s`` with its top left at ``(x, y)``; the x after it. Characters without
        a glyph are drawn blank."""
        for ch in s.upper():
            for r, bits in enumerate(FONT.get(ch, FONT[" "])):
                for c in range(3):
                    if bits & (4 >> c):
                        px, py = x + c * scale, y + r * scale
                        self.rect(px, py, px + scale, py + scale, color)
            x += 4 * scale
        return x

    def png(self) -> bytes:
        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        stride = self.width * 3
        raw = b"".join(
            b"\x00" + bytes(self.px[y * stride : (y + 1) * stride]) for y in range(self.height)
        )
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
        )  # fmt: skip


def nice_step(top: float, ticks: int = 5) -> float:
    """A round grid step (1, 2 or 5 x 10^k) for an axis from 0 to ``top``.

    >>> nice_step(9.0), nice_step(0.3), nice_step(0.0)
    (2.0, 0.1, 1.0)
    """
    if not (top > 0 and math.isfinite(top)):
        return 1.0
    raw = top / ticks
    base = 10 ** math.floor(math.log10(raw))
    return float(next(m * base for m in (1, 2, 5, 10) if m * base >= raw))


def bar_chart(
    title: str,
    groups: Sequence[str],
    series: Sequence[tuple[str, RGB]],
    values: dict[tuple[str, str], tuple[float, float]],
    width: int = 960,
    height: int = 420,
) -> bytes:
    """Per group (team) a bar per series (configuration): a light bar up to its p90 and a
    dark one up to its p50 inside it; a grid with its values on the left, the legend on
    top. ``values[(group, series)] = (p50, p90)``; a missing one is left out."""
    c = Canvas(width, height)
    left, top, bottom, right = 70, 50, height - 40, width - 20
    c.text(left, 8, title)
    x = left
    for name, color in series:
        c.rect(x, 30, x + 12, 42, color)
        x = c.text(x + 16, 31, name) + 20
    peak = max([v for pair in values.values() for v in pair if math.isfinite(v)], default=0.0)
    step = nice_step(peak)
    ymax = step * max(1, math.ceil(peak / step))

    def y_of(v: float) -> int:
        return round(bottom - (bottom - top) * (v / ymax))

    tick = 0.0
    while tick <= ymax + 1e-9:
        y = y_of(tick)
        c.rect(left, y, right, y + 1, GREY)
        c.text(6, y - 5, f"{tick:g}")
        tick += step
    slot = (right - left) / max(1, len(groups))
    bar = max(2, int(slot * 0.8 / max(1, len(series))))
    for i, group in enumerate(groups):
        x0 = round(left + i * slot + slot * 0.1)
        for j, (name, color) in enumerate(series):
            p50, p90 = values.get((group, name), (math.nan, math.nan))
            bx = x0 + j * bar
            light = tuple(255 - (255 - ch) // 3 for ch in color)
            if math.isfinite(p90):
                c.rect(bx + 1, y_of(p90), bx + bar - 1, bottom, light)  # type: ignore[arg-type]
            if math.isfinite(p50):
                c.rect(bx + 1, y_of(p50), bx + bar - 1, bottom, color)
        c.text(x0, bottom + 10, group)
    c.rect(left, top, left + 1, bottom + 1, BLACK)
    c.rect(left, bottom, right, bottom + 1, BLACK)
    return c.png()


if __name__ == "__main__":  # its examples
    import doctest

    raise SystemExit(doctest.testmod().failed)
