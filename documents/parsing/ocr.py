"""OCR: text read from a picture, locally and offline, with rapidocr_onnxruntime (PP-OCR
models in ONNX, shipped inside its wheel: nothing is downloaded, ever).

Runs in the sandboxed parser child (documents.parsing.sandbox) under its time and memory
limits. The limits a person can see (pixels, pages) are here, set by the child from its
arguments (`configure`), so the parser modules stay free of Django settings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from documents.kinds import OCR_KIND_NAMES

logger = logging.getLogger("groundwork.documents.parsing")

# A picture above this many pixels is refused before it is decoded (a small PNG can
# declare 100,000 x 100,000 pixels and take 30 GB to decode: a decompression bomb).
MAX_PIXELS = 40_000_000
# Recognised text below this confidence is noise (specks, table rules).
MIN_SCORE = 0.5
DETECT_MAX_SIDE = 2000
# Small pictures (screenshots at 1x) are enlarged up to twice, to this long side: the
# recogniser loses the spaces between words of text less than ~25 px high.
ENLARGE_TO = 1600
# A blank run in a line wider than this fraction of the line's inked height is a word
# space (measured on rendered Helvetica and on a pdfTeX manual: 0.3-0.4 splits words and
# never letters; 0.2 splits letters).
WORD_GAP = 0.35


# The kinds whose parse may run OCR, and the address space that needs (the ONNX models and
# onnxruntime's threads reserve ~1.7 GB; settings.OCR_MEMORY_MB in the pipeline).
OCR_KINDS = OCR_KIND_NAMES  # the kinds registry says which (DocumentKind.ocr)
DEFAULT_MEMORY_MB = 2560


@dataclass
class OcrLimits:
    max_pages: int = 50  # pages (PDF pages without text, TIFF frames) read by OCR per document


limits = OcrLimits()


def configure(*, max_pages: int) -> None:
    limits.max_pages = max(0, int(max_pages))


def megapixels(width: int, height: int) -> str:
    return f"{width * height / 1_000_000:.0f}"


def too_many_pixels_message(width: int, height: int) -> str:
    return (
        f"This image is {width} × {height} pixels ({megapixels(width, height)} megapixels); Groundwork reads "
        f"images of up to {MAX_PIXELS // 1_000_000} megapixels. Scale it down and upload it again."
    )


_engine = None


def _ocr_engine():
    """The OCR engine, loaded once per process from the models inside the wheel."""
    global _engine
    if _engine is None:
        from rapidocr_onnxruntime import RapidOCR

        # The detector sees the picture at up to 2,000 px on its long side ("max"), not
        # scaled up to 736 px on its short side (the package's "min" default): a wide strip
        # of text then costs 0.2 s and ~1 GB less than scaled up to 5,000 px.
        _engine = RapidOCR(det_limit_type="max", det_limit_side_len=DETECT_MAX_SIDE)
    return _engine


def ocr_image(image) -> str:
    """The text in a PIL image, line by line in reading order ("" when none is found)."""
    import numpy as np

    if image.mode != "RGB":
        image = image.convert("RGB")
    longest = max(image.size)
    if 0 < longest < ENLARGE_TO:
        factor = min(2.0, ENLARGE_TO / longest)
        image = image.resize((round(image.width * factor), round(image.height * factor)))
    boxes, lines = _detect_lines(np.asarray(image))
    return "\n".join(_lines([(box, text) for box, text in zip(boxes, _recognise(lines)) if text]))


def _detect_lines(picture):
    """(boxes, crops) of the text lines found, the steps of RapidOCR.__call__ up to
    recognition (rapidocr_onnxruntime is pinned: these are its 1.4.4 methods)."""
    engine = _ocr_engine()
    picture = engine.load_img(picture)
    scaled, ratio_h, ratio_w = engine.preprocess(picture)
    scaled, _ = engine.maybe_add_letterbox(scaled, {"preprocess": {"ratio_h": ratio_h, "ratio_w": ratio_w}})
    boxes, _ = engine.auto_text_det(scaled)
    if boxes is None or len(boxes) == 0:
        return [], []
    crops = engine.get_crop_img_list(scaled, boxes)
    crops, _, _ = engine.text_cls(crops)
    return [box.tolist() if hasattr(box, "tolist") else box for box in boxes], crops


def _recognise(lines: list) -> list[str]:
    """The text of each line crop, recognised word by word.

    The recogniser (PP-OCRv4, trained mostly on Chinese) often drops the spaces between
    English words ("Totaldue:380euros"), which would make them unsearchable. So each line
    is cut at its blank columns wider than WORD_GAP of its text height, each piece is
    recognised on its own, and the pieces are joined with spaces.
    """
    pieces, owners = [], []
    for index, crop in enumerate(lines):
        for word in _words(crop):
            pieces.append(word)
            owners.append(index)
    if not pieces:
        return ["" for _ in lines]
    results, _ = _ocr_engine().text_rec(pieces)
    texts: list[list[str]] = [[] for _ in lines]
    for owner, (text, score) in zip(owners, results):
        if float(score) >= MIN_SCORE and text.strip():
            texts[owner].append(text.strip())
    return [" ".join(words) for words in texts]


def _words(crop) -> list:
    """A line crop cut at blank runs wider than WORD_GAP x its inked height (a word space
    is ~0.28 em; gaps between letters stay well under it)."""
    import numpy as np

    gray = crop.mean(axis=2) if crop.ndim == 3 else crop
    low, high = float(gray.min()), float(gray.max())
    if high - low < 40:  # no contrast: nothing to cut, let the recogniser judge
        return [crop]
    ink = gray < (low + high) / 2
    rows = np.flatnonzero(ink.any(axis=1))
    columns = np.flatnonzero(ink.any(axis=0))
    if len(rows) == 0 or len(columns) == 0:
        return [crop]
    gap = max(3, int(round(WORD_GAP * (rows[-1] - rows[0] + 1))))
    spans, start, previous = [], columns[0], columns[0]
    for column in columns[1:]:
        if column - previous > gap:
            spans.append((start, previous + 1))
            start = column
        previous = column
    spans.append((start, previous + 1))
    pad = max(2, gap // 2)
    return [crop[:, max(0, a - pad) : min(crop.shape[1], b + pad)] for a, b in spans]


def _lines(boxes: list) -> list[str]:
    """Group recognised boxes into lines: a box whose vertical middle falls within the
    current line's height joins it; each line reads left to right."""
    items = []
    for box, text in boxes:
        ys = [point[1] for point in box]
        xs = [point[0] for point in box]
        items.append((min(ys), max(ys), min(xs), text))
    items.sort(key=lambda item: (item[0], item[2]))
    lines: list[list[tuple]] = []
    for top, bottom, left, text in items:
        middle = (top + bottom) / 2
        if lines:
            line_top = min(i[0] for i in lines[-1])
            line_bottom = max(i[1] for i in lines[-1])
            if line_top <= middle <= line_bottom:
                lines[-1].append((top, bottom, left, text))
                continue
        lines.append([(top, bottom, left, text)])
    return [" ".join(i[3] for i in sorted(line, key=lambda i: i[2])) for line in lines]
