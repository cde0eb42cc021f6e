"""A document's credits estimate, shown while it processes, is what it is then charged.

Real files of every kind go through the real pipeline (upload → queue → sandboxed parse →
chunks → embeddings → debit) against the bundled local model server, `python -m
llm.local_server`, started as `make run` starts it. Not the fake server: it counts
whitespace-separated words, the estimate counts the embedding model's own tokens, so against
it the comparison would measure nothing. The local server reports what the product charges
with each bundled model: MiniLM's [CLS] and [SEP] per input, each input cut at 256 tokens;
e5's "passage: " prefix and specials, nothing cut.
"""

import csv
import io

import pytest

from billing.services import credits_grant
from core.tenancy import account_context
from documents.chunking import embedding_text
from documents.models import Chunk, Document
from documents.tests.files import DEBIAN_PDF, docx_bytes
from documents.tests.images import image_file
from documents.tests.office_files import make_pptx, make_xlsx
from llm.embedding_tokens import input_tokens
from llm.local_models import MAX_SEQ_LEN
from llm.tests.test_local_server import server  # noqa: F401  (the real local model server, per module)
from llm.tokens import count_tokens

pytestmark = pytest.mark.slow

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


@pytest.fixture
def ingest(account_a, server, settings, upload_and_ingest):  # noqa: F811
    settings.LLM_BASE_URL = server["base_url"]
    with account_context(account_a):
        credits_grant(account=account_a, amount=100_000, reason="room for a 26-page manual")
    return lambda name, data, content_type: upload_and_ingest(account_a, name, data, content_type)


def _markdown() -> bytes:
    sections = []
    for n in range(1, 7):
        sections.append(
            f"## Section {n}\n\n"
            + " ".join(
                f"Paragraph {n}.{s} explains how the team reviews invoices, approvals and refunds." for s in range(12)
            )
        )
    # Hex digests split into many word pieces: some chunks pass the model's 256-token input
    # limit, where the provider stops counting (and so must the estimate).
    digests = "\n".join(f"{i:04d} " + (f"{i * 7919:x}" * 16)[:64] for i in range(60))
    return ("# Runbook\n\n" + "\n\n".join(sections) + "\n\n## Digests\n\n" + digests + "\n").encode()


def _csv() -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id", "name", "team", "note"])
    for i in range(120):
        writer.writerow([i, f"Person {i}", ["Sales", "Support", "R&D"][i % 3], f"joined in {2000 + i % 24}"])
    return out.getvalue().encode()


def _html() -> bytes:
    body = "".join(
        f"<h2>Policy {n}</h2><p>"
        + " ".join(
            f"Rule {n}.{s}: refunds over {s * 10} euros need a manager's approval &amp; a receipt." for s in range(10)
        )
        + "</p><ul><li>First step</li><li>Second step</li></ul>"
        for n in range(1, 6)
    )
    return f"<html><head><title>Refund policy</title></head><body><h1>Refunds</h1>{body}</body></html>".encode()


KINDS = [
    ("camlidl.pdf", lambda tmp: DEBIAN_PDF.read_bytes(), PDF),
    ("report.docx", docx_bytes, DOCX),
    ("runbook.md", lambda tmp: _markdown(), "text/markdown"),
    ("people.csv", lambda tmp: _csv(), "text/csv"),
    ("refunds.html", lambda tmp: _html(), "text/html"),
]


@pytest.mark.parametrize("name,make,content_type", KINDS, ids=[k[0] for k in KINDS])
def test_estimate_is_within_two_percent_of_the_charge(ingest, account_a, tmp_path, name, make, content_type):
    document = ingest(name, make(tmp_path), content_type)
    assert document.status == "ready", document.error
    assert document.credits_charged > 0 and document.credits_estimate is not None
    assert abs(document.credits_estimate - document.credits_charged) / document.credits_charged <= 0.02, (
        document.credits_estimate,
        document.credits_charged,
    )


def test_long_inputs_are_counted_as_the_model_cuts_them(ingest, account_a):
    document = ingest("runbook.md", _markdown(), "text/markdown")
    assert document.status == "ready", document.error
    with account_context(account_a):
        chunks = list(Chunk.objects.for_account(account_a).filter(document=document).order_by("chunk_index"))
    texts = [embedding_text(c, document.title or document.name) for c in chunks]
    # Some inputs pass the model's limit, so this checks the cut, not only the count ...
    assert max(count_tokens(t) for t in texts) > MAX_SEQ_LEN
    # ... and the estimate, counted the provider's way, is what the provider reported.
    assert document.credits_estimate == input_tokens(texts, model=document.embedding_model) == document.credits_charged


def test_estimate_is_in_the_api_while_processing_and_then_the_charge(ingest, account_a, client_a):
    document = ingest("refunds.html", _html(), "text/html")
    body = client_a.get(f"/api/v1/documents/{document.pk}/").json()
    assert body["credits_estimate"] == document.credits_estimate and body["credits_charged"] == document.credits_charged
    page = client_a.get(f"/documents/{document.pk}/").content.decode()
    assert f"<strong>{document.credits_charged}</strong>" in page

    with account_context(account_a):
        Document.objects.for_account(account_a).filter(pk=document.pk).update(status="processing")
    page = client_a.get(f"/documents/{document.pk}/").content.decode()
    assert f"about {document.credits_estimate} credits" in page


# Every kind the registry reads, for the estimate against the charge with each bundled
# embedding model (the product's default is multilingual-e5-small: "passage: " before each
# input, its own SentencePiece tokenizer, nothing cut at 256).
EVERY_KIND = [
    *KINDS,
    ("facilities.xlsx", lambda tmp: make_xlsx(), XLSX),
    ("review.pptx", lambda tmp: make_pptx(slides=8), PPTX),
    (
        "notice.png",
        lambda tmp: image_file(
            ["Holiday requests go to the team lead.", "Unused holiday carries over until March."], "png"
        ),
        "image/png",
    ),
]
MODELS = ["all-minilm-l6-v2", "multilingual-e5-small"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name,make,content_type", EVERY_KIND, ids=[k[0] for k in EVERY_KIND])
def test_estimate_is_within_five_percent_of_the_charge_for_each_model(
    ingest, account_a, settings, tmp_path, model, name, make, content_type
):
    settings.EMBEDDING_MODEL = model  # a new account's active model
    document = ingest(name, make(tmp_path), content_type)
    assert document.status == "ready", document.error
    assert document.embedding_model == model
    assert document.credits_charged > 0 and document.credits_estimate is not None
    assert abs(document.credits_estimate - document.credits_charged) / document.credits_charged <= 0.05, (
        document.credits_estimate,
        document.credits_charged,
    )
