"""Images and scans in the ingestion pipeline: how much memory their parse may take (OCR
runs in the parser sandbox), the vision model's description of an image (VISION_MODEL,
paid in credits (billing.pricing) by whoever pays for the document's ingestion), and what to say when
neither OCR nor a description found any text."""

from __future__ import annotations

import logging

from django.conf import settings

from billing import pricing, references
from billing.services import credits_debit
from core.tenancy import account_context
from documents.kinds import IMAGE_KIND_NAMES
from documents.parsing import Section
from documents.parsing.ocr import OCR_KINDS
from llm import client as llm

logger = logging.getLogger("groundwork.documents")

MSG_IMAGE_NO_TEXT = (
    "No text was found in this image, not even by OCR, so there is nothing to search. "
    "Upload a sharper picture of the text, or set up a vision model (VISION_MODEL) so that "
    "images are described."
)


def parse_memory_mb(kind: str) -> int:
    """The parser sandbox's address-space limit for a document of `kind`."""
    if kind in OCR_KINDS:
        return max(settings.PARSE_MEMORY_MB, settings.OCR_MEMORY_MB)
    return settings.PARSE_MEMORY_MB


def parse_timeout_s(kind: str) -> float:
    """The parser sandbox's time limit (wall clock and CPU) for a document of `kind`."""
    if kind in OCR_KINDS:
        return max(settings.PARSE_TIMEOUT_SECONDS, settings.OCR_TIMEOUT_SECONDS)
    return settings.PARSE_TIMEOUT_SECONDS


def is_image(kind: str) -> bool:
    return kind in IMAGE_KIND_NAMES


def image_description_sections(document, path: str, *, payer: dict) -> list[Section]:
    """The vision model's description of the image at `path` as one section
    (text_source="vision"), or [] when VISION_MODEL is unset or `document` is no image.

    The call is charged at once, its provider-reported tokens priced as vision (billing.pricing;
    the ledger records it as chat), to `payer` (the uploader's user or api_key), under a key
    per document revision: a retried job never pays twice.
    NOTE: a retried job does call the model again (the description is not kept until the
    chunks are published); only the first call is charged. Sets `document.vision_credits`.
    """
    if not settings.VISION_MODEL or not is_image(document.kind):
        return []
    with open(path, "rb") as f:
        data = f.read()
    description = llm.with_retries(
        lambda: llm.describe_image(data, document.content_type, max_tokens=settings.VISION_MAX_TOKENS)
    )
    with account_context(account_id=document.account_id):
        entry = credits_debit(
            account=document.account_id,
            tokens=description.usage.total_tokens,
            key=f"vision:{document.pk}:{document.revision}",
            kind=pricing.VISION,
            model=description.model,
            provider=description.provider,
            reference=references.document(document.pk, document.revision),
            metadata={
                "purpose": "image_description",
                "prompt_tokens": description.usage.prompt_tokens,
                "completion_tokens": description.usage.completion_tokens,
                "usage_reported": description.usage.reported,
            },
            **payer,
        )
    document.vision_credits = -entry.delta  # added to the document's credits_charged when published
    if not description.text:
        return []
    return [Section(text=description.text, heading_path=["Image description"], text_source="vision")]
