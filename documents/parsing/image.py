"""Images (PNG, JPEG, WebP, TIFF): the text in them, read by OCR (documents.parsing.ocr).

One section per image (per frame of a multi-page TIFF, with its page number), marked
text_source="ocr". An image without readable text parses to no sections: the ingestion
may still add a vision model's description (VISION_MODEL); without one it fails as
"no text". Pillow is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import logging

from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.parsing import ocr
from documents.parsing.sections import ParsedDocument, Section

logger = logging.getLogger("groundwork.documents.parsing")

MSG_IMAGE_CORRUPT = (
    "This image is damaged and could not be read. Open it in an image viewer, save it again "
    "(as PNG or JPEG), and upload that."
)


def image_size(path_or_file) -> tuple[str, int, int, int]:
    """(Pillow format, width, height, frames) read from the header only, without decoding
    pixels. Raises IngestionError(DocumentErrorCode.CORRUPT_FILE) for something Pillow cannot identify."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path_or_file) as image:
            return image.format or "", image.width, image.height, getattr(image, "n_frames", 1)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError):
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_IMAGE_CORRUPT) from None


# More frames than this is no document anyone scans; counting them costs the upload a read
# of each frame's header, so the count stops here (documents/validation.py refuses the file).
MAX_FRAMES = 10_000


def frame_sizes(fileobj, image_format: str):
    """(frame number from 1, width, height) of every frame, read from the headers only:
    no pixel is decoded. Opened through the format's own plugin, so Pillow's bomb check
    (which raises before anyone learns the size) does not hide a picture's real size; the
    caller compares each size with ocr.MAX_PIXELS itself. Stops after MAX_FRAMES + 1 frames.
    Raises what Pillow raises for a file that is not of `image_format`."""
    from PIL import Image

    Image.init()
    factory, accept = Image.OPEN[image_format]
    head = fileobj.read(16)
    fileobj.seek(0)
    if accept is not None and not accept(head):
        raise SyntaxError(f"not a {image_format} file")
    with factory(fileobj) as image:  # leaves the caller's file open
        frames = min(getattr(image, "n_frames", 1), MAX_FRAMES + 1)
        for index in range(frames):
            if index:
                image.seek(index)
            yield index + 1, image.width, image.height


def check_pixels(width: int, height: int) -> None:
    if width * height > ocr.MAX_PIXELS:
        raise IngestionError(DocumentErrorCode.IMAGE_TOO_LARGE, ocr.too_many_pixels_message(width, height))


def parse_image(path: str, fallback_title: str) -> ParsedDocument:
    """The OCR'd text of the image (each TIFF frame a page, up to the OCR page limit)."""
    from PIL import Image

    _, width, height, frames = image_size(path)
    check_pixels(width, height)
    # Pillow's own bomb guard as a second lock, at our limit (it raises above twice this).
    Image.MAX_IMAGE_PIXELS = ocr.MAX_PIXELS
    sections: list[Section] = []
    notes: list[str] = []
    read = min(frames, ocr.limits.max_pages)
    try:
        with Image.open(path) as image:
            for index in range(read):
                image.seek(index)
                check_pixels(image.width, image.height)  # every TIFF frame has its own size
                image.load()
                text = ocr.ocr_image(image)
                if text.strip():
                    page = index + 1 if frames > 1 else None
                    sections.append(Section(text=text, page_start=page, page_end=page, text_source="ocr"))
    except IngestionError:
        raise
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:
        logger.warning("unreadable image %s: %r", path, exc)
        raise IngestionError(DocumentErrorCode.CORRUPT_FILE, MSG_IMAGE_CORRUPT) from None
    if frames > read:
        notes.append(
            f"OCR read the first {read} of {frames} pages; pages {read + 1}–{frames} were skipped "
            f"(the limit is {ocr.limits.max_pages} pages a document)."
        )
    return ParsedDocument(title=fallback_title, sections=sections, notes=notes)
