"""Tags on documents: the rules, `PATCH documents/{id}/`, tags on upload,
the `tags` and `source` fields (the source registry, one lookup per page), the Knowledge
base filter's selector, the account's excluded tags (`GET/PUT settings/retrieval/`), roles,
audit and isolation. Real database, real queue, a model server on loopback."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts import services as account_services
from accounts.models import KeyScope, Role
from accounts.tests.factories import add_member, make_api_key
from audit.models import AuditEntry
from core.tenancy import account_context
from documents import source_links
from documents.errors import TagsInvalid
from documents.models import Document
from documents.selectors import document_list
from documents.services import document_upload
from documents.tags import (
    document_tags_set,
    retrieval_exclude_tags,
    retrieval_exclude_tags_set,
    tags_clean,
    tags_from_form,
)


def _key(account, scope=KeyScope.WRITE) -> str:
    with account_context(account):
        _, raw = account_services.api_key_create(
            account=account, actor=account.test_owner, name=f"{scope} key", scope=scope
        )
    return raw


def _bearer(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def _doc(account, name="notes.txt", data=b"Some notes about the quarterly plan.\n", *, actor=None, tags=None):
    with account_context(account):
        document, _ = document_upload(
            account=account, actor=actor, tags=tags, upload=SimpleUploadedFile(name, data, content_type="text/plain")
        )
    return document


# --- the rules ------------------------------------------------------------------------------


def test_tags_are_trimmed_and_unique_case_insensitively_in_their_first_spelling():
    assert tags_clean(["  Policy ", "HR", "policy", "hr", "2026"]) == ["Policy", "HR", "2026"]
    assert tags_clean([]) == [] and tags_clean(None) == []
    assert tags_clean(["x" * 40]) == ["x" * 40]
    assert tags_clean([f"t{i}" for i in range(20)]) == [f"t{i}" for i in range(20)]
    assert tags_clean([f"t{i % 20}" for i in range(30)]) == [f"t{i}" for i in range(20)]  # 20 after dedupe
    assert tags_from_form(["policy, HR", "hr", " ", "2026,"]) == ["policy", "HR", "2026"]


@pytest.mark.parametrize(
    "value, words",
    [
        ("policy", "must be a list"),
        ({"a": 1}, "must be a list"),
        ([1], "must be a string"),
        ([None], "must be a string"),
        ([""], "cannot be empty"),
        (["   "], "cannot be empty"),
        (["x" * 41], "at most 40"),
        (["a\nb"], "control characters"),
        (["a\tb"], "control characters"),
        (["a\u202eb"], "control characters"),
        (["a,b"], "comma"),
        ([f"t{i}" for i in range(21)], "At most 20"),
    ],
)
def test_malformed_tags_are_refused_with_a_clear_message(value, words):
    with pytest.raises(TagsInvalid) as raised:
        tags_clean(value)
    assert raised.value.code == "invalid_tags" and raised.value.status == 400 and raised.value.field == "tags"
    assert words in raised.value.message


# --- PATCH documents/{id}/ ------------------------------------------------------------------


def test_patch_replaces_the_tags_and_is_audited(client, account_a, fake_llm, queue):
    document = _doc(account_a)
    headers = _bearer(make_api_key(account_a))
    response = client.patch(
        f"/api/v1/documents/{document.pk}/",
        {"tags": [" Policy", "hr", "HR"]},
        content_type="application/json",
        **headers,
    )
    assert response.status_code == 200, response.content
    assert response.json()["tags"] == ["Policy", "hr"] and response.json()["source"] is None
    assert client.get(f"/api/v1/documents/{document.pk}/", **headers).json()["tags"] == ["Policy", "hr"]
    response = client.patch(
        f"/api/v1/documents/{document.pk}/", {"tags": []}, content_type="application/json", **headers
    )
    assert response.status_code == 200 and response.json()["tags"] == []
    with account_context(account_a):
        entries = list(AuditEntry.objects.for_account(account_a).filter(action="document.tags").order_by("pk"))
    assert [e.detail for e in entries] == [{"from": [], "to": ["Policy", "hr"]}, {"from": ["Policy", "hr"], "to": []}]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"tags": "policy"},
        {"tags": [""]},
        {"tags": ["x" * 41]},
        {"tags": ["a\u0007b"]},
        {"tags": [f"t{i}" for i in range(21)]},
        {"tags": [3]},
        {"name": "x"},
    ],
)
def test_patch_refuses_bad_bodies_with_400(client, account_a, fake_llm, queue, body):
    document = _doc(account_a, tags=["kept"])
    response = client.patch(
        f"/api/v1/documents/{document.pk}/", body, content_type="application/json", **_bearer(make_api_key(account_a))
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_tags" and response.json()["error"]["message"]
    with account_context(account_a):
        assert Document.objects.for_account(account_a).get(pk=document.pk).tags == ["kept"]


def test_patch_of_another_accounts_document_is_404(client, account_a, account_b, fake_llm, queue):
    document = _doc(account_a, tags=["mine"])
    response = client.patch(
        f"/api/v1/documents/{document.pk}/",
        {"tags": ["stolen"]},
        content_type="application/json",
        **_bearer(make_api_key(account_b)),
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    with account_context(account_a):
        assert Document.objects.for_account(account_a).get(pk=document.pk).tags == ["mine"]


def test_who_may_tag(client, account_a, fake_llm, queue):
    member = add_member(account_a, role=Role.MEMBER)
    viewer = add_member(account_a, role=Role.VIEWER)
    theirs = _doc(account_a, "theirs.txt", b"Uploaded by the member.\n", actor=member)
    others = _doc(account_a, "owners.txt", b"Uploaded by the owner.\n", actor=account_a.test_owner)

    def patch(document, **headers):
        return client.patch(
            f"/api/v1/documents/{document.pk}/", {"tags": ["t"]}, content_type="application/json", **headers
        )

    assert patch(others, **_bearer(_key(account_a, KeyScope.READ))).status_code == 403
    assert patch(others, **_bearer(_key(account_a, KeyScope.WRITE))).status_code == 200
    client.force_login(viewer)
    assert patch(others).status_code == 403 and patch(others).json()["error"]["code"] == "forbidden"
    client.force_login(member)
    assert patch(theirs).status_code == 200
    assert patch(others).status_code == 403
    client.force_login(account_a.test_owner)
    assert patch(theirs).status_code == 200


# --- upload with tags -----------------------------------------------------------------------


def test_upload_takes_tags_comma_separated_or_repeated(client, account_a, fake_llm, queue):
    headers = _bearer(make_api_key(account_a))
    response = client.post(
        "/api/v1/documents/", {"file": SimpleUploadedFile("a.txt", b"Alpha text.\n"), "tags": "policy, HR"}, **headers
    )
    assert response.status_code == 202, response.content
    assert response.json()["tags"] == ["policy", "HR"] and response.json()["source"] is None
    response = client.post(
        "/api/v1/documents/",
        {"file": SimpleUploadedFile("b.txt", b"Beta text.\n"), "tags": ["draft", "2026", "Draft"]},
        **headers,
    )
    assert response.status_code == 202 and response.json()["tags"] == ["draft", "2026"]


def test_upload_with_bad_tags_stores_nothing(client, account_a, fake_llm, queue):
    response = client.post(
        "/api/v1/documents/",
        {"file": SimpleUploadedFile("a.txt", b"Alpha text.\n"), "tags": "x" * 41},
        **_bearer(make_api_key(account_a)),
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_tags"
    with account_context(account_a):
        assert not Document.objects.for_account(account_a).exists()


# --- the list: tags, source, the filter -----------------------------------------------------


def test_the_list_has_tags_and_source_and_asks_the_source_registry_once_a_page(
    client, account_a, fake_llm, queue, django_assert_max_num_queries
):
    documents = [_doc(account_a, f"d{i}.txt", f"Document {i}.\n".encode(), tags=[f"t{i}"]) for i in range(5)]
    calls = []

    def lookup(document_ids):
        calls.append(sorted(document_ids))
        return {documents[0].pk: {"id": 7, "url": "https://intranet.example/handbook"}}

    source_links.register(lookup)
    try:
        headers = _bearer(make_api_key(account_a))
        response = client.get("/api/v1/documents/", **headers)
        assert response.status_code == 200
        rows = {r["id"]: r for r in response.json()["results"]}
        assert calls == [sorted(d.pk for d in documents)]
        assert rows[documents[0].pk]["source"] == {"id": 7, "url": "https://intranet.example/handbook"}
        assert rows[documents[1].pk]["source"] is None and rows[documents[1].pk]["tags"] == ["t1"]
    finally:
        source_links.unregister(lookup)
    assert source_links.sources_of([documents[0].pk]) == {}
    with django_assert_max_num_queries(12):  # the page: no query per document
        assert client.get("/api/v1/documents/", **headers).status_code == 200


def test_the_tag_filter_selector_and_its_isolation(account_a, account_b, fake_llm, queue):
    _doc(account_a, "a.txt", b"A.\n", tags=["policy"])
    _doc(account_a, "b.txt", b"B.\n", tags=["draft"])
    _doc(account_b, "c.txt", b"C.\n", tags=["policy"])
    with account_context(account_a):
        assert [d.name for d in document_list(account=account_a, tag="policy")] == ["a.txt"]
    with account_context(account_b):
        assert [d.name for d in document_list(account=account_b, tag="policy")] == ["c.txt"]
        assert list(document_list(account=account_b, tag="draft")) == []


def test_the_service_writes_nothing_for_the_same_tags(account_a, fake_llm, queue):
    document = _doc(account_a, tags=["a"])
    with account_context(account_a):
        document_tags_set(account=account_a, actor=None, document=document, tags=["a"])
        assert not AuditEntry.objects.for_account(account_a).filter(action="document.tags").exists()


# --- the account's excluded tags -------------------------------------------------------------


def test_retrieval_settings_get_and_put_for_owners_and_admins(client, account_a, account_b, fake_llm):
    client.force_login(account_a.test_owner)
    assert client.get("/api/v1/settings/retrieval/").json() == {"exclude_tags": []}
    response = client.put(
        "/api/v1/settings/retrieval/",
        {"exclude_tags": ["Confidential", "draft", "DRAFT"]},
        content_type="application/json",
    )
    assert response.status_code == 200 and response.json() == {"exclude_tags": ["Confidential", "draft"]}
    assert client.get("/api/v1/settings/retrieval/").json() == {"exclude_tags": ["Confidential", "draft"]}
    admin = add_member(account_a, role=Role.ADMIN)
    client.force_login(admin)
    assert client.put(
        "/api/v1/settings/retrieval/", {"exclude_tags": ["draft"]}, content_type="application/json"
    ).json() == {"exclude_tags": ["draft"]}
    with account_context(account_a):
        entries = AuditEntry.objects.for_account(account_a).filter(action="retrieval.exclude_tags").order_by("pk")
        assert [e.detail["to"] for e in entries] == [["Confidential", "draft"], ["draft"]]
    # Per account: B's are its own.
    with account_context(account_b):
        assert retrieval_exclude_tags(account=account_b) == []
        retrieval_exclude_tags_set(account=account_b, actor=None, exclude_tags=["b-only"])
    with account_context(account_a):
        assert retrieval_exclude_tags(account=account_a) == ["draft"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"exclude_tags": "draft"},
        {"exclude_tags": ["a,b"]},
        {"exclude_tags": [f"t{i}" for i in range(21)]},
        ["draft"],
    ],
)
def test_retrieval_settings_refuse_bad_bodies(client, account_a, fake_llm, body):
    client.force_login(account_a.test_owner)
    response = client.put("/api/v1/settings/retrieval/", body, content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_tags"


def test_retrieval_settings_refuse_members_viewers_and_keys(client, account_a, fake_llm):
    for role in (Role.MEMBER, Role.VIEWER):
        client.force_login(add_member(account_a, role=role))
        assert client.get("/api/v1/settings/retrieval/").status_code == 403
        response = client.put("/api/v1/settings/retrieval/", {"exclude_tags": []}, content_type="application/json")
        assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    client.logout()
    for scope in (KeyScope.READ, KeyScope.WRITE):
        headers = _bearer(_key(account_a, scope))
        assert client.get("/api/v1/settings/retrieval/", **headers).status_code == 403
        assert (
            client.put(
                "/api/v1/settings/retrieval/", {"exclude_tags": []}, content_type="application/json", **headers
            ).status_code
            == 403
        )
    assert client.get("/api/v1/settings/retrieval/").status_code == 401


def test_document_ids_retrievable_by_tags_and_its_isolation(account_a, account_b, fake_llm, queue):
    from documents.selectors import document_ids_retrievable

    hr = _doc(account_a, "hr.txt", b"HR.\n", tags=["HR"])
    draft = _doc(account_a, "draft.txt", b"Draft.\n", tags=["draft"])
    plain = _doc(account_a, "plain.txt", b"Plain.\n")
    ids = [hr.pk, draft.pk, plain.pk]
    with account_context(account_a):
        assert document_ids_retrievable(account=account_a, document_ids=ids) == set(ids)
        assert document_ids_retrievable(account=account_a, document_ids=ids, tags=["hr"]) == {hr.pk}
        assert document_ids_retrievable(account=account_a, document_ids=ids, exclude_tags=["HR"]) == {
            draft.pk,
            plain.pk,
        }
        retrieval_exclude_tags_set(account=account_a, actor=None, exclude_tags=["Draft"])
        assert document_ids_retrievable(account=account_a, document_ids=ids) == {hr.pk, plain.pk}
    with account_context(account_b):
        assert document_ids_retrievable(account=account_b, document_ids=ids) == set()
        assert document_ids_retrievable(account=account_a, document_ids=ids) == set()  # RLS: B's transaction
