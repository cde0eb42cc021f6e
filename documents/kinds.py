"""The document kinds Groundwork reads: one record per kind, and every lookup derived from it.

Upload validation (extensions, declared MIME types, magic bytes, messages), the parsing
package (which parser reads a kind, whether it may run OCR and so which sandbox limits it
gets) and the upload picker (its `accept` list and hint) all read this module; adding a kind
means adding one record here and the parser module it names (docs/architecture.md, "Adding
a format").

No Django and no imports from the rest of the project: validation and the sandboxed parser
both stand on this module. The parser is named by its import path, not imported, so this
module stays below the parsing package.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DocumentKind:
    """One kind of document: how an upload is recognised and which parser reads it.

    `content_type` is the canonical MIME type stored on the document; a declared type in
    `also_declared_as` (what browsers and clients really send) is accepted too. A binary
    kind is recognised by `signature` starting within the first `signature_window` bytes; a
    text kind (`is_text`) by decoding as UTF-8/UTF-16 text. `parser` is
    "package.module:function", a callable (path, fallback_title) -> ParsedDocument.
    """

    name: str
    label: str  # as in "named like a Word (.docx) file"
    article: str  # "a" or "an", for the label
    short_label: str  # as in "Groundwork reads PDF, DOCX, ... files"
    extensions: tuple[str, ...]
    content_type: str
    also_declared_as: tuple[str, ...]
    is_text: bool
    parser: str
    signature: bytes = b""
    signature_window: int = 0
    # More signatures of the same kind (TIFF is written in both byte orders).
    also_signatures: tuple[bytes, ...] = ()
    # An image kind: Pillow's name of its format (it must open as exactly that); "" otherwise.
    image_format: str = ""
    # An Office Open XML kind (a zip package): the part that holds its main document and the
    # [Content_Types].xml types that part may have; upload validation checks both, so a .docx
    # renamed .xlsx is refused. Empty for other kinds.
    office_part: str = ""
    office_main_types: tuple[str, ...] = ()
    office_noun: str = ""  # as in "a real Excel workbook" (the article is `article`)
    # Its parse may run OCR (scanned PDF pages, images): the parser sandbox then gets the OCR
    # engine's memory and time limits (OCR_MEMORY_MB, OCR_TIMEOUT_SECONDS; documents/images.py)
    # instead of PARSE_MEMORY_MB and PARSE_TIMEOUT_SECONDS, and its pages count against OCR_MAX_PAGES.
    ocr: bool = False

    @property
    def is_image(self) -> bool:
        return bool(self.image_format)

    @property
    def declared_types(self) -> frozenset[str]:
        """Every declared MIME type that agrees with this kind."""
        return frozenset((self.content_type, *self.also_declared_as))

    @property
    def label_with_article(self) -> str:
        return f"{self.article} {self.label}"

    def has_signature(self, head: bytes) -> bool:
        """Whether the first bytes carry this binary kind's signature."""
        window = head[: self.signature_window]
        return any(signature in window for signature in (self.signature, *self.also_signatures))


KINDS: tuple[DocumentKind, ...] = (
    DocumentKind(
        name="pdf",
        label="PDF",
        article="a",
        short_label="PDF",
        extensions=(".pdf",),
        content_type="application/pdf",
        also_declared_as=("application/x-pdf",),
        is_text=False,
        parser="documents.parsing.pdf:parse_pdf",
        # Acrobat accepts the header anywhere in the first 1024 bytes; some generators prefix junk.
        signature=b"%PDF-",
        signature_window=1024,
        ocr=True,
    ),
    DocumentKind(
        name="docx",
        label="Word (.docx)",
        article="a",
        short_label="DOCX",
        extensions=(".docx",),
        content_type="application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        also_declared_as=("application/zip", "application/x-zip-compressed"),
        is_text=False,
        parser="documents.parsing.docx:parse_docx",
        signature=b"PK\x03\x04",
        signature_window=4,
        office_part="word/document.xml",
        office_noun="Word document",
        office_main_types=(
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",
            "application/vnd.ms-word.document.macroEnabled.main+xml",
        ),
    ),
    DocumentKind(
        name="txt",
        label="text (.txt)",
        article="a",
        short_label="TXT",
        extensions=(".txt",),
        content_type="text/plain",
        also_declared_as=(),
        is_text=True,
        parser="documents.parsing.text:parse_txt",
    ),
    DocumentKind(
        name="markdown",
        label="Markdown",
        article="a",
        short_label="Markdown",
        extensions=(".md", ".markdown"),
        content_type="text/markdown",
        also_declared_as=("text/x-markdown", "text/plain"),
        is_text=True,
        parser="documents.parsing.markdown:parse_markdown",
    ),
    DocumentKind(
        name="csv",
        label="CSV",
        article="a",
        short_label="CSV",
        extensions=(".csv",),
        content_type="text/csv",
        # Windows browsers send application/vnd.ms-excel for .csv when Excel is installed.
        also_declared_as=("application/csv", "text/comma-separated-values", "application/vnd.ms-excel", "text/plain"),
        is_text=True,
        parser="documents.parsing.csv_format:parse_csv",
    ),
    DocumentKind(
        name="html",
        label="HTML",
        article="an",
        short_label="HTML",
        extensions=(".html", ".htm"),
        content_type="text/html",
        also_declared_as=("application/xhtml+xml",),
        is_text=True,
        parser="documents.parsing.html_format:parse_html",
    ),
    # Spreadsheets and slides: read in the parser sandbox (openpyxl, python-pptx), never run.
    DocumentKind(
        name="xlsx",
        label="Excel (.xlsx)",
        article="an",
        short_label="XLSX",
        extensions=(".xlsx",),
        content_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        also_declared_as=("application/zip", "application/x-zip-compressed"),
        is_text=False,
        parser="documents.parsing.xlsx:parse_xlsx",
        signature=b"PK\x03\x04",
        signature_window=4,
        office_part="xl/workbook.xml",
        office_noun="Excel workbook",
        office_main_types=(
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml",
            "application/vnd.openxmlformats-officedocument.spreadsheetml.template.main+xml",
            "application/vnd.ms-excel.sheet.macroEnabled.main+xml",
        ),
    ),
    DocumentKind(
        name="pptx",
        label="PowerPoint (.pptx)",
        article="a",
        short_label="PPTX",
        extensions=(".pptx",),
        content_type="application/vnd.openxmlformats-officedocument.presentationml.presentation",
        also_declared_as=("application/zip", "application/x-zip-compressed"),
        is_text=False,
        parser="documents.parsing.pptx:parse_pptx",
        signature=b"PK\x03\x04",
        signature_window=4,
        office_part="ppt/presentation.xml",
        office_noun="PowerPoint presentation",
        office_main_types=(
            "application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml",
            "application/vnd.ms-powerpoint.presentation.macroEnabled.main+xml",
        ),
    ),
    # Images are read by OCR (documents.parsing.ocr), and described by VISION_MODEL when set.
    DocumentKind(
        name="png",
        label="PNG image",
        article="a",
        short_label="PNG",
        extensions=(".png",),
        content_type="image/png",
        also_declared_as=(),
        is_text=False,
        parser="documents.parsing.image:parse_image",
        signature=b"\x89PNG\r\n\x1a\n",
        signature_window=8,
        image_format="PNG",
        ocr=True,
    ),
    DocumentKind(
        name="jpeg",
        label="JPEG image",
        article="a",
        short_label="JPEG",
        extensions=(".jpg", ".jpeg"),
        content_type="image/jpeg",
        also_declared_as=("image/jpg", "image/pjpeg"),
        is_text=False,
        parser="documents.parsing.image:parse_image",
        signature=b"\xff\xd8\xff",
        signature_window=3,
        image_format="JPEG",
        ocr=True,
    ),
    DocumentKind(
        # RIFF....WEBP: "WEBP" at byte 8 (Pillow then checks the rest at upload).
        name="webp",
        label="WebP image",
        article="a",
        short_label="WebP",
        extensions=(".webp",),
        content_type="image/webp",
        also_declared_as=(),
        is_text=False,
        parser="documents.parsing.image:parse_image",
        signature=b"WEBP",
        signature_window=12,
        image_format="WEBP",
        ocr=True,
    ),
    DocumentKind(
        name="tiff",
        label="TIFF image",
        article="a",
        short_label="TIFF",
        extensions=(".tif", ".tiff"),
        content_type="image/tiff",
        also_declared_as=("image/tif",),
        is_text=False,
        parser="documents.parsing.image:parse_image",
        signature=b"II*\x00",
        signature_window=4,
        also_signatures=(b"MM\x00*",),
        image_format="TIFF",
        ocr=True,
    ),
)

KIND_BY_EXTENSION: dict[str, DocumentKind] = {ext: kind for kind in KINDS for ext in kind.extensions}
KIND_NAMES: tuple[str, ...] = tuple(kind.name for kind in KINDS)
KIND_BY_NAME: dict[str, DocumentKind] = {kind.name: kind for kind in KINDS}
IMAGE_KIND_NAMES: frozenset[str] = frozenset(kind.name for kind in KINDS if kind.is_image)
OFFICE_KINDS: tuple[DocumentKind, ...] = tuple(kind for kind in KINDS if kind.office_part)
OCR_KIND_NAMES: frozenset[str] = frozenset(kind.name for kind in KINDS if kind.ocr)
# The upload picker's `accept` attribute: every extension Groundwork reads.
UPLOAD_ACCEPT: str = ",".join(ext for kind in KINDS for ext in kind.extensions)

SUPPORTED_SUMMARY = ", ".join(kind.short_label for kind in KINDS[:-1]) + f" and {KINDS[-1].short_label} files"
# The picker's hint: "PDF, DOCX, …, WebP or TIFF, several at once".
UPLOAD_HINT = ", ".join(kind.short_label for kind in KINDS[:-1]) + f" or {KINDS[-1].short_label}, several at once."
# The getting-started text's list: "PDF, DOCX, TXT, Markdown, CSV, HTML, XLSX, PPTX and images
# (PNG, JPEG, WebP, TIFF)": every kind in the registry, the images under one word.
_IMAGES = [kind.short_label for kind in KINDS if kind.is_image]
_NOT_IMAGES = [kind.short_label for kind in KINDS if not kind.is_image]
FORMATS_IN_WORDS: str = ", ".join(_NOT_IMAGES) + (f" and images ({', '.join(_IMAGES)})" if _IMAGES else "")
