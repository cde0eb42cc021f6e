"""Upload validation: decide from the name, the declared MIME type and the first bytes
whether a file is one Groundwork can read, before anything is stored.

Pure functions, no Django. The supported kinds come from the registry (documents.kinds);
the text-encoding rule and the zip-bomb guard are the parsing package's, so the upload is
judged by the same rules as the stored file.
"""

from __future__ import annotations

import re
import struct
import unicodedata
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from core.error_codes import CoreErrorCode
from documents.error_codes import DocumentErrorCode
from documents.errors import UploadRejected
from documents.kinds import KIND_BY_EXTENSION, SUPPORTED_SUMMARY, DocumentKind
from documents.parsing.archives import archive_bomb_message, megabytes, office_kind_of, zip_bomb_problem
from documents.parsing.sections import decode_text_prefix

# A declared type of application/octet-stream (or none at all) means "unknown": extension
# and magic bytes decide alone.
UNKNOWN_DECLARED_TYPES = {"", "application/octet-stream", "binary/octet-stream", "application/unknown"}

# Advice for formats people commonly try, keyed by extension.
CONVERSION_ADVICE = {
    ".doc": "Save it as .docx or PDF and upload again.",
    ".rtf": "Save it as .docx or PDF and upload again.",
    ".odt": "Save it as .docx or PDF and upload again.",
    ".pages": "Export it as .docx or PDF and upload again.",
    ".xls": "Save it as .xlsx (or the sheet as CSV) and upload again.",
    ".ods": "Save it as .xlsx (or the sheet as CSV) and upload again.",
    ".ppt": "Save it as .pptx or PDF and upload again.",
    ".odp": "Save it as .pptx or PDF and upload again.",
}
IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".heic", ".svg"}

SAFE_NAME_MAX = 200
DEFAULT_STEM = "document"

# Magic numbers of formats someone might rename; the label goes into the message. Only
# signatures that no real text starts with (a Windows program's "MZ" could begin a
# sentence; its NUL bytes give it away instead).
_MAGIC = (
    (b"%PDF-", "pdf", "a PDF"),
    (b"PK\x03\x04", "zip", "a zip archive (such as a .docx)"),
    (b"PK\x05\x06", "zip", "a zip archive (such as a .docx)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "ole", "a legacy Microsoft Office file (.doc/.xls)"),
    (b"\x89PNG\r\n\x1a\n", "png", "a PNG image"),
    (b"\xff\xd8\xff", "jpeg", "a JPEG image"),
    (b"II*\x00", "tiff", "a TIFF image"),
    (b"MM\x00*", "tiff", "a TIFF image"),
    (b"GIF87a", "gif", "a GIF image"),
    (b"GIF89a", "gif", "a GIF image"),
    (b"\x7fELF", "elf", "a Linux program"),
    (b"\x1f\x8b", "gzip", "a gzip archive"),
    (b"{\\rtf", "rtf", "an RTF document"),
)


@dataclass(frozen=True)
class ValidatedUpload:
    kind: str
    content_type: str
    safe_name: str


def validate_upload(
    *,
    name: str,
    declared_type: str | None,
    data_head: bytes,
    size: int,
    max_bytes: int,
    open_file: Callable[[], BinaryIO],
) -> ValidatedUpload:
    """Accept an upload or raise UploadRejected with a code, a status and an actionable message.

    Checks, in order: the extension is supported (415), the size is not 0 (400) nor over
    `max_bytes` (413), the declared type agrees with the extension (415), the first bytes
    agree with the extension (415), and for DOCX, XLSX and PPTX the archive is that kind of
    Office file and not a zip bomb (415/400). `open_file()` may return the upload object itself: it is read from
    the start and never closed.
    """
    safe_name = sanitize_filename(name)
    extension = _extension(safe_name)
    kind = _kind_for_extension(extension, safe_name)
    if size <= 0:
        raise UploadRejected(
            DocumentErrorCode.EMPTY_FILE,
            f"{safe_name} is empty (0 bytes). Check that you picked the right file and upload it again.",
            status=400,
        )
    if size > max_bytes:
        raise UploadRejected(
            CoreErrorCode.TOO_LARGE,
            f"{safe_name} is {megabytes(size)} MB; the limit is "
            f"{megabytes(max_bytes)} MB. Split it into smaller files and upload "
            "them separately.",
            status=413,
        )
    _check_declared_type(kind, declared_type, safe_name)
    _check_magic(kind, data_head, size, safe_name)
    if kind.office_part:
        _check_office_package(kind, open_file, safe_name)
    if kind.is_image:
        _check_image(kind, open_file, safe_name)
    return ValidatedUpload(kind=kind.name, content_type=kind.content_type, safe_name=safe_name)


def sanitize_filename(name: str) -> str:
    """A display name without directories, control or bidi characters, with collapsed
    whitespace, at most 200 characters with the extension kept, and never empty."""
    name = unicodedata.normalize("NFC", name or "")
    name = re.split(r"[/\\]", name)[-1]
    # Cc: control characters; Cf: format characters such as U+202E RIGHT-TO-LEFT OVERRIDE,
    # which can make "evil\u202Efdp.exe" display as "evilexe.pdf".
    name = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in name)
    name = " ".join(name.split())
    # Windows drops trailing dots and spaces; "report.pdf." should still be report.pdf.
    name = name.rstrip(". ")
    stem, extension = _split_extension(name)
    if not stem.strip(" ."):
        stem = DEFAULT_STEM
    if len(extension) > 20:  # not an extension, just a name with a dot in it
        stem, extension = stem + extension, ""
    stem = stem[: max(1, SAFE_NAME_MAX - len(extension))].rstrip()
    return (stem + extension)[:SAFE_NAME_MAX]


def _split_extension(name: str) -> tuple[str, str]:
    dot = name.rfind(".")
    if dot < 0 or dot == len(name) - 1:
        return name, ""
    return name[:dot], name[dot:]


def _extension(safe_name: str) -> str:
    return _split_extension(safe_name)[1].lower()


def _kind_for_extension(extension: str, safe_name: str) -> DocumentKind:
    kind = KIND_BY_EXTENSION.get(extension)
    if kind is not None:
        return kind
    if not extension:
        message = (
            f"{safe_name} has no file extension, so Groundwork cannot tell what kind of file it is. "
            f"Groundwork reads {SUPPORTED_SUMMARY}; rename it with the right extension "
            "(for example .pdf) and upload again."
        )
    elif extension in IMAGE_EXTENSIONS:
        message = (
            f"Groundwork reads {SUPPORTED_SUMMARY}; {extension} images are not one of them. "
            "Save the image as PNG or JPEG and upload that."
        )
    else:
        advice = CONVERSION_ADVICE.get(extension, "Convert it to one of these formats and upload again.")
        message = f"Groundwork reads {SUPPORTED_SUMMARY}; {extension} is not one of them. {advice}"
    raise UploadRejected(DocumentErrorCode.UNSUPPORTED_TYPE, message, status=415)


def _check_declared_type(kind: DocumentKind, declared_type: str | None, safe_name: str) -> None:
    declared = (declared_type or "").split(";", 1)[0].strip().lower()
    if declared in UNKNOWN_DECLARED_TYPES or declared in kind.declared_types:
        return
    raise UploadRejected(
        DocumentErrorCode.TYPE_MISMATCH,
        f"{safe_name} has {kind.label_with_article} extension, but it was sent as {declared}. The name and the "
        "type must agree: rename the file with the extension that matches its contents and upload again.",
        status=415,
    )


def _check_magic(kind: DocumentKind, head: bytes, size: int, safe_name: str) -> None:
    found = _sniff(head)
    if not kind.is_text:
        if not kind.has_signature(head):
            _mismatch(safe_name, kind, found)
    elif found is not None:
        _mismatch(safe_name, kind, found)
    else:
        _check_text_head(head, complete=len(head) >= size, safe_name=safe_name, kind=kind)


def _sniff(head: bytes) -> tuple[str, str] | None:
    """(format, label) of a known binary format by its first bytes, or None."""
    for magic, fmt, label in _MAGIC:
        if head.startswith(magic):
            return fmt, label
    return None


def _mismatch(safe_name: str, kind: DocumentKind, found: tuple[str, str] | None) -> None:
    looks_like = f"its contents look like {found[1]}" if found else "its contents do not match that type"
    raise UploadRejected(
        DocumentErrorCode.TYPE_MISMATCH,
        f"{safe_name} is named like {kind.label_with_article} file, but {looks_like}. Rename it with "
        "the extension that matches its contents, or export it again from the program that made it.",
        status=415,
    )


def _check_text_head(head: bytes, *, complete: bool, safe_name: str, kind: DocumentKind) -> None:
    """The head decodes as UTF-8 (BOM allowed) or BOM-marked UTF-16 and has no NUL;
    a multi-byte character cut at the end of an incomplete head is fine."""
    text = decode_text_prefix(head, final=complete)
    if text is None:
        raise UploadRejected(
            DocumentErrorCode.TYPE_MISMATCH,
            f"{safe_name} is named like {kind.label_with_article} file, but it is not UTF-8 text. "
            "Open it in a text editor, save it with UTF-8 encoding, and upload again.",
            status=415,
        )
    if "\x00" in text:
        raise UploadRejected(
            DocumentErrorCode.TYPE_MISMATCH,
            f"{safe_name} is named like {kind.label_with_article} file, but it contains binary data "
            "(NUL bytes). Save it as plain UTF-8 text and upload again.",
            status=415,
        )


def _check_office_package(kind: DocumentKind, open_file: Callable[[], BinaryIO], safe_name: str) -> None:
    """A DOCX, XLSX or PPTX upload is a zip within the bomb limits whose main part is that
    kind's: a .docx renamed .xlsx is refused, naming what it really is."""
    fileobj = open_file()
    start = _tell(fileobj)
    try:
        fileobj.seek(0)
        # ZipFile over a file object never closes it: the caller's upload stays usable.
        with zipfile.ZipFile(fileobj) as archive:
            problem = zip_bomb_problem(archive)
            if problem:
                raise UploadRejected(
                    DocumentErrorCode.ARCHIVE_BOMB,
                    archive_bomb_message(safe_name, problem, kind.office_noun),
                    status=400,
                )
            found = office_kind_of(archive)
    except zipfile.BadZipFile:
        raise UploadRejected(
            DocumentErrorCode.TYPE_MISMATCH,
            f"{safe_name} is named like {kind.label_with_article} file, but it is not a readable "
            f"{kind.extensions[0]} (the zip structure is damaged). Open it in {kind.office_noun.split()[0]} and "
            f"save it again as {kind.extensions[0]}, or save it as PDF.",
            status=415,
        ) from None
    finally:
        if start is not None:
            fileobj.seek(start)
    if found is None:
        raise UploadRejected(
            DocumentErrorCode.TYPE_MISMATCH,
            f"{safe_name} is named like {kind.label_with_article} file, but it is a zip archive without "
            f"{kind.article} {kind.office_noun} inside. Upload the documents inside it one by one.",
            status=415,
        )
    if found is not kind:
        raise UploadRejected(
            DocumentErrorCode.TYPE_MISMATCH,
            f"{safe_name} is named like {kind.label_with_article} file, but it is {found.label_with_article} "
            f"file ({found.article} {found.office_noun}). Rename it with the {found.extensions[0]} extension "
            "and upload again.",
            status=415,
        )


def _tell(fileobj) -> int | None:
    try:
        return fileobj.tell()
    except (AttributeError, OSError, ValueError):
        return None


def _check_image(kind: DocumentKind, open_file: Callable[[], BinaryIO], safe_name: str) -> None:
    """An image upload opens as exactly its kind's format (from its headers; no pixels are
    decoded here) and every frame (a TIFF's pages) has at most ocr.MAX_PIXELS pixels: a small
    file can declare a picture that takes gigabytes to decode, and a first small frame must
    not let a huge second one through to the worker."""
    from PIL import Image, UnidentifiedImageError

    from documents.parsing import ocr
    from documents.parsing.image import MAX_FRAMES, frame_sizes

    fileobj = open_file()
    start = _tell(fileobj)
    try:
        fileobj.seek(0)
        sizes = list(frame_sizes(fileobj, kind.image_format))
    except (
        UnidentifiedImageError,
        OSError,
        ValueError,
        SyntaxError,
        EOFError,
        KeyError,
        struct.error,
        Image.DecompressionBombError,
    ):
        raise UploadRejected(
            DocumentErrorCode.TYPE_MISMATCH,
            f"{safe_name} is named like {kind.label_with_article} file, but it is not a readable "
            f"{kind.short_label} image (it is damaged or of another format). Open it in an image viewer, save it "
            "again as PNG or JPEG, and upload that.",
            status=415,
        ) from None
    finally:
        if start is not None:
            fileobj.seek(start)
    if len(sizes) > MAX_FRAMES:
        raise UploadRejected(
            DocumentErrorCode.IMAGE_TOO_LARGE,
            f"{safe_name} has more than {MAX_FRAMES:,} pages. Split it into smaller files and upload those.",
            status=413,
        )
    for frame, width, height in sizes:
        if width * height > ocr.MAX_PIXELS:
            where = f" (page {frame} of {len(sizes)})" if len(sizes) > 1 else ""
            raise UploadRejected(
                DocumentErrorCode.IMAGE_TOO_LARGE,
                f"{safe_name}{where}: {ocr.too_many_pixels_message(width, height)}",
                status=413,
            )
