"""Read the pixels of a PNG screenshot with the standard library (tests that check what a
browser drew; Chromium writes 8-bit RGB or RGBA, non-interlaced)."""

from __future__ import annotations

import struct
import zlib

__all__ = ["colours"]


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def colours(png: bytes) -> dict[tuple[int, int, int], int]:
    """How many pixels of each ``(r, g, b)`` colour the image has.

    Raises:
        ValueError: not an 8-bit, non-interlaced RGB/RGBA PNG.
    """
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + length]
        header = data if kind == b"IHDR" else header
        idat += data if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour_type not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour_type}, interlace {interlace}")
    bpp = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    counts: dict[tuple[int, int, int], int] = {}
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = previous[i], previous[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + (0, left, up, (left + up) // 2, _paeth(left, up, corner))[kind]) & 0xFF
        for x in range(0, stride, bpp):
            pixel = (line[x], line[x + 1], line[x + 2])
            counts[pixel] = counts.get(pixel, 0) + 1
        previous = line
    return counts
