"""Two rules every reader shares: a document being deleted is gone at once (list, detail,
search), and another account's id answers exactly like a missing one."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.tests.factories import make_api_key
from core.tenancy import account_context
from documents.errors import DocumentNotFound, ReindexRunNotFound
from documents.models import Document, Status
from documents.selectors import document_access_by_id, document_list, reindex_run_access_by_id
from documents.services import account_reindex_start, document_delete, document_upload
from llm.fake_server import fake_embedding
from retrieval.search import expand_passages, first_chunks, hybrid_search

TEXT = b"The espresso machine in the kitchen is descaled every month by the office team."


@pytest.fixture
def uploaded(account_a, fake_llm, run_jobs, django_capture_on_commit_callbacks):
    """A ready document of account A."""
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        document, _ = document_upload(
            account=account_a, actor=None, upload=SimpleUploadedFile("kitchen.txt", TEXT, content_type="text/plain")
        )
    run_jobs()
    with account_context(account_a):
        return Document.objects.for_account(account_a).get(pk=document.pk)


def _search(account, query):
    with account_context(account):
        return hybrid_search(account=account, query=query, query_vector=fake_embedding(query), threshold=0.0)


def test_a_deleting_document_is_absent_from_list_detail_and_search(client, account_a, owner_a, uploaded):
    assert uploaded.pk in {h.document_id for h in _search(account_a, "espresso machine descaled")}
    with account_context(account_a):
        hits = _search(account_a, "espresso machine descaled")
        document_delete(account=account_a, document=uploaded)  # its job is not run: it stays `deleting`
        assert Document.objects.for_account(account_a).get(pk=uploaded.pk).status == Status.DELETING
        assert not Document.objects.for_account(account_a).visible().filter(pk=uploaded.pk).exists()
        assert list(document_list(account=account_a)) == []
        with pytest.raises(DocumentNotFound):
            document_access_by_id(account=account_a, document_id=uploaded.pk)
        assert first_chunks(account=account_a, document=uploaded) == []
        assert expand_passages(account=account_a, hits=hits) == []
    assert _search(account_a, "espresso machine descaled") == []

    headers = {"HTTP_AUTHORIZATION": f"Bearer {make_api_key(account_a)}"}
    assert client.get("/api/v1/documents/", **headers).json()["results"] == []
    detail = client.get(f"/api/v1/documents/{uploaded.pk}/", **headers)
    assert detail.status_code == 404 and detail.json()["error"]["code"] == "not_found"
    client.force_login(owner_a)
    assert client.get(f"/documents/{uploaded.pk}/").status_code == 404
    assert "kitchen.txt" not in client.get("/documents/").content.decode()


def _answer(call) -> tuple:
    with pytest.raises(DocumentNotFound) as caught:
        call()
    return caught.value.code, caught.value.message, caught.value.status


def test_another_accounts_id_and_a_missing_id_get_the_same_answer(client, account_a, account_b, owner_b, uploaded):
    missing = uploaded.pk + 10_000
    with account_context(account_b):
        foreign = _answer(lambda: document_access_by_id(account=account_b, document_id=uploaded.pk))
        absent = _answer(lambda: document_access_by_id(account=account_b, document_id=missing))
        malformed = _answer(lambda: document_access_by_id(account=account_b, document_id="12abc"))
    assert foreign == absent == malformed == (foreign[0], foreign[1], 404)
    assert foreign[0] == "not_found"

    headers = {"HTTP_AUTHORIZATION": f"Bearer {make_api_key(account_b)}"}
    for method in ("get", "delete"):
        responses = [getattr(client, method)(f"/api/v1/documents/{pk}/", **headers) for pk in (uploaded.pk, missing)]
        assert [r.status_code for r in responses] == [404, 404]
        assert responses[0].json() == responses[1].json()
    client.force_login(owner_b)
    pages = [client.get(f"/documents/{pk}/") for pk in (uploaded.pk, missing)]
    assert [p.status_code for p in pages] == [404, 404]
    assert all(b"kitchen.txt" not in p.content for p in pages)
    with account_context(account_a):
        assert document_access_by_id(account=account_a, document_id=str(uploaded.pk)) == uploaded


def test_another_accounts_reindex_run_is_not_found_like_a_missing_one(
    account_a, account_b, uploaded, django_capture_on_commit_callbacks
):
    with account_context(account_a), django_capture_on_commit_callbacks():
        run = account_reindex_start(account=account_a)
    with account_context(account_b):
        for run_id in (run.pk, run.pk + 10_000):
            with pytest.raises(ReindexRunNotFound):
                reindex_run_access_by_id(account=account_b, run_id=run_id)
    with account_context(account_a):
        assert reindex_run_access_by_id(account=account_a, run_id=run.pk) == run
