"""What a new team's credits buy with the bundled models: credits per PDF page ingested
(EMBEDDING_MODEL, by default multilingual-e5-small, through the real pipeline) and credits per
document question (a real chat turn: the query's embedding, the prompt and the answer),
measured against `python -m llm.local_server`. The basis of SIGNUP_CREDITS's default.

PDFs: the 26-page Debian camlidl manual (the tests' fixture), the real PDF manuals found in
/usr/share/doc (when present), and the GPL-3 text laid out as a plain book page (50 lines
of at most 80 characters, ~3,500 characters a page) when /usr/share/common-licenses has it.
Each document's upload estimate is compared with what it was charged.
"""

from __future__ import annotations

import statistics
import textwrap
import time
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

PDF = "application/pdf"
SYSTEM_PDFS = [
    Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),
]
GPL = Path("/usr/share/common-licenses/GPL-3")
QUESTIONS = [
    "How do I declare an interface in camlidl?",
    "What does the camlidl manual say about pointers and the unique attribute?",
    "How are arrays with a size_is attribute mapped to OCaml?",
    "What is the purpose of the quote directive in IDL files?",
    "How does camlidl handle COM components?",
    "What must I do when conveying modified source versions under the GPL?",
    "What does the license say about installation information for user products?",
    "When does the license terminate and how can it be reinstated?",
    "What is the MIME type of a file that has no known extension according to the spec?",
    "How do I parse a DER encoded structure with libtasn1?",
]


def _book_pdf(text: str, *, lines_per_page: int = 50, width: int = 80) -> bytes:
    from documents.tests.files import make_pdf

    lines = []
    for paragraph in text.split("\n\n"):
        lines.extend(textwrap.wrap(" ".join(paragraph.split()), width) + [""])
    pages = ["\n".join(lines[i : i + lines_per_page]) for i in range(0, len(lines), lines_per_page)]
    return make_pdf(pages, title="GNU General Public License v3")


def _documents() -> list[tuple[str, bytes]]:
    from documents.tests.files import DEBIAN_PDF

    docs = [("camlidl-manual.pdf", DEBIAN_PDF.read_bytes())]
    docs += [(p.name, p.read_bytes()) for p in SYSTEM_PDFS if p.is_file()]
    if GPL.is_file():
        docs.append(("gpl-3.pdf", _book_pdf(GPL.read_text())))
    return docs


def _ingest(account, name: str, data: bytes) -> dict:
    from core.tenancy import account_context
    from documents import ingestion
    from documents.models import Document
    from documents.services import document_upload

    with account_context(account):
        document, _ = document_upload(
            account=account,
            actor=None,
            upload=SimpleUploadedFile(name, data + f"\n% {time.time()}\n".encode(), content_type=PDF),
        )
    ingestion.ingest(account_id=account.pk, document_id=document.pk, revision=document.revision)
    with account_context(account):
        document = Document.objects.for_account(account).get(pk=document.pk)
    assert document.status == "ready", (name, document.error)
    return {
        "document": name,
        "pages": document.page_count,
        "chunks": document.chunk_count,
        "estimate": document.credits_estimate,
        "charged": document.credits_charged,
        "credits_per_page": round(document.credits_charged / document.page_count, 1),
        "estimate_error": f"{100 * (document.credits_estimate - document.credits_charged) / document.credits_charged:+.2f}%",
    }


def _question_cost(account, user, question: str) -> dict:
    """The credits a document question costs, end to end: a real chat turn (route, query
    embedding, the configured profile's prompt and answer, the guard), its balance before
    minus after."""
    from bench.answer_eval import _ask

    result = _ask(account, user, question)
    return {
        "question": question,
        "route": result["route"],
        "credits": result["credits"],
        "completion": result["completion_tokens"],
        "error": result["error"],
    }


def run() -> dict:
    from accounts.models import User
    from accounts.services import account_create
    from bench.ingestion import LocalModels
    from chat.agent import profile

    with LocalModels() as local:
        settings.LLM_BASE_URL = local.base_url
        owner = User.objects.create_user(email=f"bench-credits-{time.time_ns()}@bench.test", password=None)
        account = account_create(name="bench credits", owner=owner, initial_credits=10_000_000)
        documents = [_ingest(account, name, data) for name, data in _documents()]
        settings.CHAT_RATE_PER_USER = settings.CHAT_RATE_PER_ACCOUNT = "100000/min"
        questions = [_question_cost(account, owner, q) for q in QUESTIONS]
    pages = sum(d["pages"] for d in documents)
    charged = sum(d["charged"] for d in documents)
    totals = [q["credits"] for q in questions]
    return {
        "documents": documents,
        "credits_per_pdf_page": {
            "overall": round(charged / pages, 1),
            "pages": pages,
            "charged": charged,
            "median_document": statistics.median(d["credits_per_page"] for d in documents),
        },
        "question": {"credits": {"median": statistics.median(totals), "max": max(totals)}, "per_question": questions},
        "settings": f"CHUNK_SIZE={settings.CHUNK_SIZE}, CHUNK_OVERLAP={settings.CHUNK_OVERLAP}, "
        f"RAG_TOP_K={settings.RAG_TOP_K}, chat profile {profile().name}",
    }
