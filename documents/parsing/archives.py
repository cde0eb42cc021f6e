"""The zip-bomb guard, shared by upload validation (on the upload) and the DOCX parser
(its re-check on the stored file), and the MB figures their messages use.

No Django here: the sandboxed child imports this module without settings.
"""

from __future__ import annotations

import zipfile
import zlib

from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.kinds import KIND_BY_NAME, OFFICE_KINDS, DocumentKind

ZIP_MAX_TOTAL_UNCOMPRESSED = 200 * 1024 * 1024
ZIP_MAX_MEMBERS = 10_000
ZIP_MAX_RATIO = 100
ZIP_RATIO_APPLIES_ABOVE = 10 * 1024 * 1024


def zip_bomb_problem(archive: zipfile.ZipFile) -> str | None:
    """Why `archive` looks like a zip bomb, from its central directory alone, or None.

    Declared sizes are trustworthy enough here: zipfile stops reading a member at its
    declared size and then fails the CRC check, so a member cannot inflate past it.
    """
    members = archive.infolist()
    if len(members) > ZIP_MAX_MEMBERS:
        return f"it contains {len(members):,} files (the limit is {ZIP_MAX_MEMBERS:,})"
    total = 0
    for member in members:
        total += member.file_size
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > ZIP_RATIO_APPLIES_ABOVE and ratio > ZIP_MAX_RATIO:
            return (
                f"one part expands {ratio:,.0f} times to {megabytes(member.file_size)} MB (more than {ZIP_MAX_RATIO}:1)"
            )
    if total > ZIP_MAX_TOTAL_UNCOMPRESSED:
        return f"it expands to {megabytes(total)} MB (the limit is {megabytes(ZIP_MAX_TOTAL_UNCOMPRESSED)} MB)"
    return None


def archive_bomb_message(name: str, problem: str, noun: str = "Word document") -> str:
    """The message for an Office file (DOCX, XLSX, PPTX: `noun`) refused as a zip bomb."""
    return (
        f"{name} cannot be processed safely: {problem}. If it is a real {noun}, remove large "
        "embedded media (or save it as PDF) and upload again."
    )


# [Content_Types].xml lists a few dozen part types; a larger one is not an Office file.
CONTENT_TYPES_MAX_BYTES = 1024 * 1024


def office_kind_of(archive: zipfile.ZipFile) -> DocumentKind | None:
    """Which Office Open XML kind (DOCX, XLSX, PPTX) a zip package is, from its main part and
    the type [Content_Types].xml gives it; None for any other zip. Call after the bomb check."""
    names = set(archive.namelist())
    try:
        info = archive.getinfo("[Content_Types].xml")
    except KeyError:
        return None
    if info.file_size > CONTENT_TYPES_MAX_BYTES:
        return None
    # Matching the type strings is enough to tell the three apart, and parses no untrusted XML.
    try:
        content_types = archive.read(info).decode("utf-8", "replace")
    except (zlib.error, EOFError) as exc:  # a damaged member: the zip is damaged
        raise zipfile.BadZipFile(str(exc)) from None
    for kind in OFFICE_KINDS:
        if kind.office_part in names and any(f'"{t}"' in content_types for t in kind.office_main_types):
            return kind
    return None


def megabytes(size: int) -> str:
    """Size in MB (2**20 bytes) for a message: "25", "25.5", "0.01"; never rounds to "0"."""
    value = size / (1024 * 1024)
    if value >= 10:
        return f"{value:,.0f}"
    for digits in (1, 2, 3, 4, 6):
        text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
        if text != "0":
            return text
    return text


def check_office_package(path: str, kind_name: str, *, corrupt_message: str) -> None:
    """Re-check a stored DOCX/XLSX/PPTX before its parser opens it (validation saw the upload,
    this is the stored file): within the zip-bomb limits and really that kind of package.
    Raises IngestionError "archive_bomb" or "corrupt_file" (`corrupt_message`)."""
    kind = KIND_BY_NAME[kind_name]
    try:
        with zipfile.ZipFile(path) as archive:
            problem = zip_bomb_problem(archive)
            found = None if problem else office_kind_of(archive)
    except zipfile.BadZipFile:
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, corrupt_message) from None
    if problem:
        raise IngestionError(
            DocumentErrorCode.ARCHIVE_BOMB, archive_bomb_message("This file", problem, kind.office_noun)
        )
    if found is not kind:
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, corrupt_message)
