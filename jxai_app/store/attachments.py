"""Attachments: files a user uploads for a message (docs/attachments.md).

::

    attachment_upload(*, user, name, data, quota) -> Attachment      (unclaimed; checks below)
    attachment_get(*, user, attachment_id) -> Attachment             (owner, or staff who may view conversations)
    attachments_claim(*, user, message, ids, keep=()) -> list[Attachment]   (inside a send's transaction)
    attachments_sweep(*, older_than) -> int                          (unclaimed uploads removed)
    attachment_bytes(attachment) -> bytes; data_url(attachment) -> str
    attachment_chunks(attachment) -> Iterator[bytes]                 (the stored bytes in pieces)
    content_parts(text, attachments) -> OpenAI content parts          (the wire's user message)
    storage_used(user) -> int

The checks of an upload (docs/attachments.md "Limits and checks"), each a problem that saves
nothing: the name (no path separators, control characters or ``.``/``..``); the type sniffed
from the bytes (``filetype``) and the name's extension agreeing with it; images decoded whole
by Pillow (pixel limit before decoding, truncated files refused) and re-encoded without their
metadata when they carry any (EXIF, XMP, PNG text); PDFs read by pypdf, their text extracted;
text files valid UTF-8. The bytes go through Django's storage API
(:func:`jxai_app.conf.attachment_storage`); a row's file is deleted from storage once no row
names it any more (every delete, cascades included: a conversation, a message, a user).
"""

from __future__ import annotations

import base64
import hashlib
import io
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePosixPath
from typing import Any, Final, Iterable, Iterator, Sequence

import filetype
from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.db import transaction
from django.db.models import Max
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone
from PIL import Image, UnidentifiedImageError
from pypdf import PdfReader
from pypdf.errors import PyPdfError

from jxai_app import conf
from jxai_app.core.problems import problem_error
from jxai_app.models import Attachment, Message
from jxai_app.store.common import parse_id

__all__ = ["IMAGE_TYPES", "attachment_bytes", "attachment_chunks", "attachment_dict", "attachment_get", "attachment_upload",
           "attachments_claim", "attachments_sweep", "content_parts", "data_url", "storage_used"]

IMAGE_TYPES: Final[dict[str, frozenset[str]]] = {
    "image/png": frozenset({".png"}),
    "image/jpeg": frozenset({".jpg", ".jpeg"}),
    "image/gif": frozenset({".gif"}),
    "image/webp": frozenset({".webp"}),
}
"""Image types taken, with the extensions a name of each may end in."""
PDF: Final[str] = "application/pdf"
TEXT_TYPES: Final[dict[str, str]] = {
    ".txt": "text/plain", ".md": "text/markdown", ".markdown": "text/markdown", ".csv": "text/csv",
    ".tsv": "text/tab-separated-values", ".json": "application/json", ".xml": "application/xml",
    ".yaml": "application/yaml", ".yml": "application/yaml", ".toml": "application/toml", ".log": "text/plain",
    ".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".ts": "text/plain", ".py": "text/x-python",
    ".java": "text/plain", ".c": "text/plain", ".h": "text/plain", ".cpp": "text/plain", ".go": "text/plain",
    ".rs": "text/plain", ".rb": "text/plain", ".sh": "text/plain", ".sql": "text/plain",
}
"""Text-like documents by extension (their bytes must be UTF-8 text), and the type each is stored as."""
_METADATA_KEYS: Final[tuple[str, ...]] = ("exif", "xmp", "XML:com.adobe.xmp", "comment")
"""``Image.info`` members holding metadata an upload is re-encoded without."""
_NAME_MAX: Final[int] = 255
UNCLAIMED_FOR: Final[timedelta] = timedelta(days=1)
"""An upload no message claimed within this long is removed (:func:`attachments_sweep`)."""


@dataclass(frozen=True, slots=True)
class _Checked:
    """An upload that passed the checks: what is stored and saved."""

    media_type: str
    data: bytes
    width: int | None = None
    height: int | None = None
    text: str = ""


def _unsupported(detail: str) -> Exception:
    return problem_error("unsupported-media-type", detail)


def _checked_name(name: Any) -> str:
    """The original name, refused when it could name a path or hide characters."""
    if not isinstance(name, str) or not name.strip() or len(name) > _NAME_MAX:
        raise problem_error("invalid-request", f"A file name must be 1 to {_NAME_MAX} characters.")
    if "/" in name or "\\" in name or name.strip() in (".", ".."):
        raise problem_error("invalid-request", "A file name must not contain a path separator.")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in name):
        raise problem_error("invalid-request", "A file name must not contain control characters.")
    return name


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… cut: the document is longer than {limit} characters]"


def _image(data: bytes, media_type: str, max_pixels: int) -> _Checked:
    """Decode the whole image (Pillow); re-encode it without metadata when it has any."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            if width * height > max_pixels:
                raise problem_error("payload-too-large", f"The image is {width} x {height} pixels; at most "
                                    f"{max_pixels} pixels are taken.")
            img.load()
            metadata = bool(img.getexif()) or any(key in img.info for key in _METADATA_KEYS) \
                or bool(getattr(img, "text", None))
            if metadata:
                out = io.BytesIO()
                options: dict[str, Any] = {"quality": "keep"} if img.format == "JPEG" else {}
                img.info.clear()
                img.save(out, format=img.format, **options)
                data = out.getvalue()
    except Image.DecompressionBombError:
        raise problem_error("payload-too-large", f"The image has more than {max_pixels} pixels.") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise _unsupported(f"The image cannot be read (truncated or damaged): {exc}") from None
    return _Checked(media_type, data, width, height)


def _pdf(data: bytes, text_chars: int) -> _Checked:
    """Read the PDF (pypdf) and extract its text."""
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise _unsupported("The PDF is encrypted; upload one that opens without a password.")
        text = "\n\n".join(page.extract_text() or "" for page in reader.pages)
    except (PyPdfError, OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise _unsupported(f"The PDF cannot be read: {exc}") from None
    return _Checked(PDF, data, text=_cut(text, text_chars))


def _check(name: str, data: bytes, limits: conf.AttachmentLimits) -> _Checked:
    """The type sniffed from the bytes, agreeing with the name's extension, then its own checks."""
    extension = PurePosixPath(name).suffix.lower()
    kind = filetype.guess(data)
    if kind is not None:
        if kind.mime in IMAGE_TYPES:
            if extension not in IMAGE_TYPES[kind.mime]:
                raise _unsupported(f"{name!r} holds a {kind.mime} image; its name must end in "
                                   f"{' or '.join(sorted(IMAGE_TYPES[kind.mime]))}.")
            return _image(data, kind.mime, limits.max_pixels)
        if kind.mime == PDF:
            if extension != ".pdf":
                raise _unsupported(f"{name!r} holds a PDF; its name must end in .pdf.")
            return _pdf(data, limits.text_chars)
        raise _unsupported(f"{name!r} is {kind.mime}, which jxai does not take (images, PDFs and text files).")
    if extension == ".pdf" or any(extension in exts for exts in IMAGE_TYPES.values()):
        raise _unsupported(f"{name!r} is named like an image or a PDF but its contents are not one.")
    if extension not in TEXT_TYPES:
        raise _unsupported(f"{name!r}: jxai takes images (PNG, JPEG, GIF, WebP), PDFs and text files "
                           f"({', '.join(sorted(TEXT_TYPES))}).")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _unsupported(f"{name!r} is not UTF-8 text.") from None
    if "\x00" in text:
        raise _unsupported(f"{name!r} is not text (it holds NUL characters).")
    return _Checked(TEXT_TYPES[extension], data, text=_cut(text, limits.text_chars))


def storage_used(user: Any) -> int:
    """Bytes of attachments ``user`` keeps: each stored file once (an edit's copies share one)."""
    sizes = Attachment.objects.filter(owner=user).order_by().values("file").annotate(bytes=Max("size"))
    return sum(row["bytes"] for row in sizes)


def attachment_upload(*, user: Any, name: Any, data: bytes, quota: int | None) -> Attachment:
    """Check and store one upload, unclaimed (docs/attachments.md "Uploading").

    Args:
        user: the uploader (its owner).
        name: the file's original name.
        data: its bytes (at most ``JXAI_MAX_ATTACHMENT_BYTES``; the caller may refuse a larger
            body before reading it, this checks again).
        quota: the bytes the user may keep (:func:`jxai_app.policy.storage.storage_quota`),
            ``None`` for no limit.

    Returns:
        The saved row (``message`` ``None``).

    Raises:
        ProblemError: ``invalid-request`` (the name), ``payload-too-large`` (over the file cap,
            over the image pixel limit, over the quota), ``unsupported-media-type`` (a type not
            taken, contents not matching the name, a truncated image, an unreadable PDF,
            binary "text"). Nothing is saved.
    """
    limits = conf.get_attachment_limits()
    name = _checked_name(name)
    if len(data) > limits.max_bytes:
        raise problem_error("payload-too-large", f"A file may be at most {limits.max_bytes} bytes.")
    if not data:
        raise problem_error("invalid-request", "The file is empty.")
    checked = _check(name, data, limits)
    attachment_id = uuid.uuid4()
    storage = conf.attachment_storage()
    stored = storage.save(f"attachments/{user.pk}/{attachment_id.hex}{PurePosixPath(name).suffix.lower()}",
                          ContentFile(checked.data))
    try:
        with transaction.atomic():
            get_user_model().objects.select_for_update().filter(pk=user.pk).first()  # one upload at a time
            if quota is not None and storage_used(user) + len(checked.data) > quota:
                raise problem_error("payload-too-large", f"Your attachments would take more than your {quota} "
                                    "bytes; delete conversations with files to make room.")
            return Attachment.objects.create(
                id=attachment_id, owner=user, name=name, media_type=checked.media_type, size=len(checked.data),
                sha256=hashlib.sha256(checked.data).hexdigest(), width=checked.width, height=checked.height,
                text=checked.text, file=stored)
    except BaseException:
        storage.delete(stored)
        raise


def attachment_get(*, user: Any, attachment_id: Any) -> Attachment:
    """The attachment, for its owner or for staff with the ``view_conversation`` permission
    (docs/attachments.md "Reading a file").

    Raises:
        ProblemError: ``not-found`` for a missing, malformed or someone else's id alike.
    """
    pk = parse_id(attachment_id)
    found = None if pk is None else Attachment.objects.filter(pk=pk).first()
    if found is None or (found.owner_id != user.pk and not (
            user.is_staff and user.has_perm("jxai_app.view_conversation"))):
        raise problem_error("not-found", "No such attachment.")
    return found


def attachments_claim(*, user: Any, message: Message, ids: Sequence[Any],
                      keep: Iterable[Attachment] = ()) -> list[Attachment]:
    """Give the user message ``message`` its attachments, in ``ids`` order (call it in the
    send's transaction, docs/attachments.md "Sending"). Each id is the user's unclaimed upload
    or one of ``keep`` (an edited question's: the new message gets a copy naming the same file).

    Raises:
        ProblemError: ``invalid-request`` (not a list of ids, repeated ids),
            ``payload-too-large`` (over ``JXAI_MAX_ATTACHMENTS_PER_MESSAGE``), ``not-found``
            (an id that is not the user's unclaimed upload nor one kept).
    """
    limit = conf.get_attachment_limits().per_message
    wanted = [parse_id(raw) for raw in ids]
    if None in wanted:
        raise problem_error("not-found", "No such attachment.")
    if len(set(wanted)) != len(wanted):
        raise problem_error("invalid-request", "An attachment is named twice.")
    if len(wanted) > limit:
        raise problem_error("payload-too-large", f"A message may carry at most {limit} attachments.")
    kept = {a.pk: a for a in keep}
    fresh = {a.pk: a for a in Attachment.objects.select_for_update().order_by().filter(
        owner=user, message__isnull=True, pk__in=[pk for pk in wanted if pk not in kept])}
    if len(fresh) + sum(pk in kept for pk in wanted) != len(wanted):
        raise problem_error("not-found", "No such attachment (it is not yours, already sent, or expired).")
    claimed: list[Attachment] = []
    for position, pk in enumerate(wanted):
        if pk in kept:
            row = kept[pk]
            claimed.append(Attachment.objects.create(
                owner=row.owner, message=message, position=position, name=row.name, media_type=row.media_type,
                size=row.size, sha256=row.sha256, width=row.width, height=row.height, text=row.text,
                file=row.file))
        else:
            row = fresh[pk]
            row.message, row.position = message, position
            claimed.append(row)
    if fresh:
        Attachment.objects.bulk_update([fresh[pk] for pk in fresh], ["message", "position"])
    message._prefetched_objects_cache = {**getattr(message, "_prefetched_objects_cache", {}),
                                         "attachments": claimed}
    return claimed


def attachments_sweep(*, older_than: timedelta = UNCLAIMED_FOR) -> int:
    """Delete the uploads no message claimed within ``older_than`` (their files too, once no
    row names them). Returns how many rows went."""
    deleted, _ = Attachment.objects.filter(message__isnull=True,
                                           created_at__lt=timezone.now() - older_than).delete()
    return deleted


def attachment_bytes(attachment: Attachment) -> bytes:
    """The stored bytes (from the attachments storage)."""
    with conf.attachment_storage().open(attachment.file, "rb") as handle:
        data: bytes = handle.read()
    return data


def attachment_chunks(attachment: Attachment, chunk_size: int = 64 * 1024) -> Iterator[bytes]:
    """The stored bytes in pieces of at most ``chunk_size`` bytes (Django's ``File.chunks``
    on the attachments storage), so a caller copying the file never holds it whole (the
    export, docs/data.md "Export format").

    Raises:
        OSError: the storage cannot read the file (``FileNotFoundError`` when it is gone).
    """
    with conf.attachment_storage().open(attachment.file, "rb") as handle:
        yield from handle.chunks(chunk_size)


def data_url(attachment: Attachment) -> str:
    """``data:<media type>;base64,<the stored bytes>`` (RFC 2397)."""
    return f"data:{attachment.media_type};base64,{base64.b64encode(attachment_bytes(attachment)).decode('ascii')}"


def content_parts(text: str, attachments: Sequence[Attachment], *, files: bool = False) -> list[dict[str, Any]]:
    """A user message's OpenAI content parts (docs/attachments.md "What the model gets"): its
    text, then per attachment an ``image_url`` part with the image's data URL; with ``files``
    (the model's ``input`` holds ``"file"``) a PDF as a ``file`` part
    ``{"type": "file", "file": {"filename", "file_data": <data URL>}}``; any other document as
    a ``text`` part holding its name and extracted text."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for attachment in attachments:
        if attachment.is_image:
            parts.append({"type": "image_url", "image_url": {"url": data_url(attachment)}})
        elif files and attachment.media_type == "application/pdf":
            parts.append({"type": "file", "file": {"filename": attachment.name, "file_data": data_url(attachment)}})
        else:
            parts.append({"type": "text", "text": f'<file name="{attachment.name}" type="{attachment.media_type}">\n'
                                                  f'{attachment.text}\n</file>'})
    return parts


def attachment_dict(attachment: Attachment) -> dict[str, Any]:
    """An attachment in protocol shape: ``{"id", "name", "mediaType", "size", "width",
    "height", "url"}`` (``url``: the owner-checked file view; docs/api.md "Attachments")."""
    return {"id": str(attachment.pk), "name": attachment.name, "mediaType": attachment.media_type,
            "size": attachment.size, "width": attachment.width, "height": attachment.height,
            "url": f"/ai/attachments/{attachment.pk}"}


@receiver(post_delete, sender=Attachment, dispatch_uid="jxai_attachment_file")
def _delete_file(sender: Any, instance: Attachment, **kwargs: Any) -> None:
    """Once the delete is committed, remove the file from storage when no row names it."""
    name = instance.file

    def remove() -> None:
        if not Attachment.objects.filter(file=name).exists():
            conf.attachment_storage().delete(name)

    transaction.on_commit(remove)
