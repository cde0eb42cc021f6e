"""The zip-bomb guard, shared by upload validation (on the upload) and the DOCX parser
(its re-check on the stored file), and the MB figures their messages use.

No Django here: the sandboxed child imports this module without settings.
"""
from __future__ import annotations

import zipfile

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
            return (f"one part expands {ratio:,.0f} times to {megabytes(member.file_size)} MB "
                    f"(more than {ZIP_MAX_RATIO}:1)")
    if total > ZIP_MAX_TOTAL_UNCOMPRESSED:
        return (f"it expands to {megabytes(total)} MB "
                f"(the limit is {megabytes(ZIP_MAX_TOTAL_UNCOMPRESSED)} MB)")
    return None


def archive_bomb_message(name: str, problem: str) -> str:
    """The message for a DOCX refused as a zip bomb."""
    return (f"{name} cannot be processed safely: {problem}. If it is a real Word document, remove large "
            "embedded media (or save it as PDF) and upload again.")


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
