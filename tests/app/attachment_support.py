"""Files for the attachment tests, made with the libraries the app reads them with (Pillow),
or by hand where no library writes them (a PDF with text, a decompression bomb's header)."""

from __future__ import annotations

import io
import struct
import zlib
from typing import Any

import pytest
from PIL import Image


def png(width: int = 4, height: int = 3, colour: tuple[int, int, int] = (200, 30, 40)) -> bytes:
    """A small RGB PNG with no metadata."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, format="PNG")
    return out.getvalue()


def jpeg_with_gps() -> bytes:
    """A JPEG whose EXIF holds a GPS position (tag 0x8825, the GPS IFD)."""
    image = Image.new("RGB", (8, 8), (10, 120, 200))
    exif = image.getexif()
    exif[0x010F] = "PhoneMaker"  # Make
    exif.get_ifd(0x8825)[2] = (48.0, 51.0, 24.0)  # GPSLatitude
    out = io.BytesIO()
    image.save(out, format="JPEG", exif=exif.tobytes())
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(side: int = 60000) -> bytes:
    """A PNG announcing ``side`` x ``side`` pixels (3.6 billion by default) in a few bytes."""
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + \
        _chunk(b"IEND", b"")


def pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` (ASCII) in Helvetica, with a correct cross-reference table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("ascii")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


@pytest.fixture
def media_root(settings: Any, tmp_path: Any) -> Any:
    """A fresh MEDIA_ROOT: the default attachment storage (a FileSystemStorage) writes under it."""
    settings.MEDIA_ROOT = tmp_path
    return tmp_path


def stored_files(root: Any) -> list[Any]:
    """Every file under ``root`` (the attachments storage's tree)."""
    return sorted(p for p in root.rglob("*") if p.is_file())
