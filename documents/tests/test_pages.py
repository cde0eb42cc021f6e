"""Knowledge base pages: upload from the dashboard, live status JSON, the document page,
delete and reindex, and the 404 another account gets."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.tests.factories import add_member
from core.tenancy import account_context
from documents.errors import DocumentNotFound
from documents.models import Document
from documents.selectors import chunk_list, document_access_by_id, document_list, reindex_run_current


def _upload(client, name="notes.txt", data=b"Our office opens at nine.", json=False):
    headers = {"HTTP_ACCEPT": "application/json"} if json else {}
    return client.post(
        "/documents/upload/", {"file": SimpleUploadedFile(name, data, content_type="text/plain")}, **headers
    )


def test_empty_state_tells_a_new_user_what_to_do(client_a):
    page = client_a.get("/documents/").content.decode()
    assert "No documents yet" in page and 'type="file"' in page and "csrfmiddlewaretoken" in page


def test_upload_from_the_page_then_ready(client_a, fake_llm, run_jobs, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = _upload(client_a, json=True)
    assert response.status_code == 202 and response.json()["document"]["status"] == "pending"
    run_jobs()
    body = client_a.get("/documents/status/").json()
    status = body["documents"][0]
    assert status["status"] == "ready" and status["chunk_count"] == 1
    assert body["credits_remaining"] == 10000 - status["credits_charged"] < 10000
    page = client_a.get("/documents/").content.decode()
    assert "notes.txt" in page and "badge-ready" in page


def test_bad_upload_from_the_page_says_why(client_a):
    response = _upload(client_a, name="old.doc", data=b"\xd0\xcf\x11\xe0" + b"\0" * 50, json=True)
    assert response.status_code == 415 and ".docx" in response.json()["error"]["message"]
    followed = client_a.post(
        "/documents/upload/", {"file": SimpleUploadedFile("x.doc", b"\xd0\xcf\x11\xe0")}, follow=True
    )
    assert ".docx" in followed.content.decode()


def test_document_page_shows_chunks_pages_and_cost(
    client_a, account_a, fake_llm, run_jobs, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        _upload(client_a, data=b"<script>alert(1)</script> is how a document could attack")
    run_jobs()
    with account_context(account_a):
        document = Document.objects.for_account(account_a).get()
    page = client_a.get(f"/documents/{document.pk}/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert f"{document.credits_charged}" in page and "#0" in page


def test_delete_and_reindex_from_the_page(client_a, account_a, fake_llm, run_jobs, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        _upload(client_a)
    run_jobs()
    with account_context(account_a):
        document = Document.objects.for_account(account_a).get()
    with django_capture_on_commit_callbacks(execute=True):
        client_a.post(f"/documents/{document.pk}/reindex/")
    run_jobs()
    with account_context(account_a):
        assert Document.objects.for_account(account_a).get().revision == 2
    with django_capture_on_commit_callbacks(execute=True):
        client_a.post(f"/documents/{document.pk}/delete/")
    assert client_a.get(f"/documents/{document.pk}/").status_code == 404
    run_jobs()
    with account_context(account_a):
        assert not Document.objects.for_account(account_a).exists()


def test_another_accounts_document_url_is_404(
    client, account_a, account_b, owner_b, fake_llm, run_jobs, django_capture_on_commit_callbacks
):
    client.force_login(account_a.test_owner)
    with django_capture_on_commit_callbacks(execute=True):
        _upload(client)
    run_jobs()
    with account_context(account_a):
        document = Document.objects.for_account(account_a).get()
    client.force_login(owner_b)
    for url in (f"/documents/{document.pk}/",):
        assert client.get(url).status_code == 404
    assert client.post(f"/documents/{document.pk}/delete/").status_code == 404
    assert client.post(f"/documents/{document.pk}/reindex/").status_code == 404
    assert "notes.txt" not in client.get("/documents/").content.decode()
    assert client.get("/documents/status/").json()["documents"] == []


def test_members_can_use_the_knowledge_base(client, account_a):
    member = add_member(account_a)
    client.force_login(member)
    assert client.get("/documents/").status_code == 200


def test_selectors_are_scoped_to_the_account(
    account_a, account_b, fake_llm, run_jobs, django_capture_on_commit_callbacks
):
    from documents.services import document_upload

    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        document, _ = document_upload(
            account=account_a, actor=None, upload=SimpleUploadedFile("a.txt", b"A's words", content_type="text/plain")
        )
    run_jobs()
    with account_context(account_b):
        assert list(document_list(account=account_b)) == []
        with pytest.raises(DocumentNotFound):
            document_access_by_id(account=account_b, document_id=document.pk)
        assert list(chunk_list(account=account_b, document=document)) == []
        assert reindex_run_current(account=account_b) is None
        # Even naming A explicitly while acting for B, the database shows nothing.
        assert list(document_list(account=account_a)) == []


def test_the_upload_picker_offers_every_kind_the_registry_reads(client_a):
    """The picker's accept list and hint are rendered from documents/kinds.py: images included,
    and a kind added there is offered here with no template edit."""
    import re

    from documents.kinds import KINDS

    html = client_a.get("/documents/").content.decode()
    accept = re.search(r'id="file-input"[^>]*accept="([^"]+)"', html).group(1).split(",")
    assert sorted(accept) == sorted(ext for kind in KINDS for ext in kind.extensions)
    assert {".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff"} <= set(accept)
    hint = re.search(r'id="file-hint">([^<]+)<', html).group(1)
    assert all(kind.short_label in hint for kind in KINDS)


def test_a_long_name_may_wrap_after_its_separators_and_shows_whole_on_hover(
    client_a, account_a, fake_llm, upload_and_ingest
):
    document = upload_and_ingest(account_a, "R&D_price-list-2026.txt", b"Tea costs two euros.")
    html = client_a.get("/documents/").content.decode()
    assert (
        f'<a class="doc-name" href="/documents/{document.pk}/" title="R&amp;D_price-list-2026.txt">'
        "R&amp;D_<wbr>price-<wbr>list-<wbr>2026.<wbr>txt</a>"
    ) in html
    page = client_a.get(f"/documents/{document.pk}/").content.decode()
    assert '<h1 class="doc-name">R&amp;D_<wbr>price-<wbr>list-<wbr>2026.<wbr>txt</h1>' in page
