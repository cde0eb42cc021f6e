"""Real pictures of text for the OCR tests, made here: pages of a real text PDF rendered by
pypdfium2 and saved by Pillow as PNG/JPEG/WebP/TIFF, and scanned PDFs built from such
renders (pages that are only a picture, no text layer). Nothing here fakes an OCR result:
the text must be read back from pixels."""

from __future__ import annotations

import io

import pypdfium2
from PIL import Image

from documents.tests.files import make_pdf

# Pillow's save format for each image kind.
SAVE_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP", "tiff": "TIFF"}
EXTENSIONS = {"png": ".png", "jpeg": ".jpg", "webp": ".webp", "tiff": ".tiff"}
CONTENT_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "tiff": "image/tiff"}


def render_pages(pdf: bytes, *, dpi: int = 150, crop_top: float | None = None) -> list[Image.Image]:
    """Each page of `pdf` as an RGB picture; `crop_top` keeps only that fraction of the
    page's top (where make_pdf writes), so a test OCRs a small picture."""
    document = pypdfium2.PdfDocument(pdf)
    try:
        images = []
        for page in document:
            image = page.render(scale=dpi / 72).to_pil().convert("RGB")
            page.close()
            if crop_top:
                image = image.crop((0, 0, image.width, int(image.height * crop_top)))
            images.append(image)
        return images
    finally:
        document.close()


def text_picture(lines: list[str], *, dpi: int = 150) -> Image.Image:
    """A picture of `lines` of text: a one-page text PDF rendered, top of the page only."""
    return render_pages(make_pdf(["\n".join(lines)]), dpi=dpi, crop_top=0.06 + 0.025 * len(lines))[0]


def image_file(lines: list[str], kind: str) -> bytes:
    """`lines` as an image file of `kind` (png, jpeg, webp, tiff)."""
    out = io.BytesIO()
    text_picture(lines).save(out, format=SAVE_FORMATS[kind], **({"quality": 90} if kind in ("jpeg", "webp") else {}))
    return out.getvalue()


def scanned_pdf(pages: list[str], *, dpi: int = 150) -> bytes:
    """A PDF whose pages are pictures of the text PDF's pages (no text layer), as a
    scanner makes it: Pillow saves the renders as a multi-page image PDF."""
    images = [image.convert("L") for image in render_pages(make_pdf(pages), dpi=dpi)]
    out = io.BytesIO()
    images[0].save(out, format="PDF", save_all=True, append_images=images[1:], resolution=dpi)
    return out.getvalue()
