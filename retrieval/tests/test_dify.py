"""Dify's External Knowledge API: `POST /api/v1/dify/retrieval` driven with
the request bodies Dify documents (docs.dify.ai, "External Knowledge API": the plain request,
and metadata_condition with `name` as a list (older Dify) and as a string (current)), through
the real pipeline, database and a model server on loopback. Dify's response and error shapes,
the charge, tags, and isolation: another account's or a restricted collection is 2001."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.tests.factories import make_api_key
from billing.models import CreditLedgerEntry
from core.tenancy import account_context, dangerously_bypass_tenancy
from documents.services import (
    collection_create,
    collection_default_ensure,
    document_upload,
)
from documents.tags import document_tags_set, retrieval_exclude_tags_set

URL = "/api/v1/dify/retrieval"
HOLIDAYS = "Holiday policy: everyone has twenty-eight days of paid holiday a year, approved by the team lead."
SECRET = "Holiday policy draft: the board considers thirty days of paid holiday a year for directors."
PLAIN = "Holiday policy notes: paid holiday requests go through the holiday calendar two weeks ahead."
ELSEWHERE = "Holiday policy of the sales team: paid holiday is planned around the quarter's end."
QUERY = "What is the paid holiday policy?"


@pytest.fixture
def kb(account_a, fake_llm, run_jobs, django_capture_on_commit_callbacks):
    """Account A: three tagged documents in General, one in another collection."""
    with account_context(account_a):
        general = collection_default_ensure(account=account_a)
        sales = collection_create(account=account_a, actor=account_a.test_owner, name="Sales")
    documents = {}
    for name, text, collection, tags in (
        ("hr.md", HOLIDAYS, general, ["HR"]),
        ("secret.md", SECRET, general, ["confidential"]),
        ("plain.md", PLAIN, general, []),
        ("sales.md", ELSEWHERE, sales, ["HR"]),
    ):
        with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
            documents[name], _ = document_upload(
                account=account_a,
                actor=None,
                collection=collection,
                tags=tags,
                upload=SimpleUploadedFile(name, text.encode(), "text/markdown"),
            )
    run_jobs()
    return {"general": general, "sales": sales, "documents": documents}


def _post(client, body, key=None, authorization=None):
    headers = {"HTTP_AUTHORIZATION": authorization if authorization is not None else f"Bearer {key}"}
    return client.post(URL, body, content_type="application/json", **headers)


def _titles(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {r["title"] for r in response.json()["records"]}


def test_dify_documented_request_answers_records(client, account_a, kb):
    key = make_api_key(account_a)
    body = {
        "knowledge_id": str(kb["general"].pk),
        "query": QUERY,
        "retrieval_setting": {"top_k": 2, "score_threshold": 0.0},
    }
    response = _post(client, body, key)
    assert response.status_code == 200, response.content
    records = response.json()["records"]
    assert len(records) == 2
    for record in records:
        assert set(record) == {"content", "score", "title", "metadata"}
        assert isinstance(record["metadata"], dict)  # never null: Dify's pipeline fails on null
        assert 0.0 <= record["score"] <= 1.0 and record["content"] and record["title"].endswith(".md")
        assert record["metadata"]["collection_id"] == kb["general"].pk
    # Only the collection asked for, and charged like a search.
    assert _titles(_post(client, {**body, "retrieval_setting": {"top_k": 10, "score_threshold": 0}}, key)) == {
        "hr.md",
        "secret.md",
        "plain.md",
    }
    assert _titles(_post(client, {**body, "knowledge_id": str(kb["sales"].pk)}, key)) == {"sales.md"}
    with account_context(account_a):
        keys = (
            CreditLedgerEntry.objects.for_account(account_a)
            .filter(reference="search")
            .values_list("idempotency_key", flat=True)
        )
        assert len(keys) == 3 and all(k.startswith("dify:") for k in keys)


def test_score_threshold_keeps_only_records_at_least_that_similar(client, account_a, kb):
    key = make_api_key(account_a)
    body = {
        "knowledge_id": str(kb["general"].pk),
        "query": QUERY,
        "retrieval_setting": {"top_k": 10, "score_threshold": 0.0},
    }
    scores = [r["score"] for r in _post(client, body, key).json()["records"]]
    cut = sorted(scores)[len(scores) // 2]
    kept = _post(client, {**body, "retrieval_setting": {"top_k": 10, "score_threshold": cut}}, key).json()["records"]
    assert kept and all(r["score"] >= cut for r in kept) and len(kept) <= len(scores)
    assert _post(client, {**body, "retrieval_setting": {"top_k": 10, "score_threshold": 1.0}}, key).json() == {
        "records": []
    }


@pytest.mark.parametrize(
    "condition, expected",
    [
        # Older Dify: `name` is a list of metadata names.
        (
            {
                "logical_operator": "and",
                "conditions": [{"name": ["tags"], "comparison_operator": "contains", "value": "hr"}],
            },
            {"hr.md"},
        ),
        # Current Dify: `name` is a string.
        (
            {"conditions": [{"name": "tags", "comparison_operator": "not contains", "value": "Confidential"}]},
            {"hr.md", "plain.md"},
        ),
        (
            {
                "logical_operator": "or",
                "conditions": [
                    {"name": "tags", "comparison_operator": "is", "value": "hr"},
                    {"name": "tags", "comparison_operator": "is", "value": "confidential"},
                ],
            },
            {"hr.md", "secret.md"},
        ),
        (
            {
                "conditions": [
                    {"name": "tags", "comparison_operator": "in", "value": ["hr", "confidential"]},
                    {"name": "tags", "comparison_operator": "not in", "value": ["hr"]},
                ]
            },
            {"secret.md"},
        ),
        ({"logical_operator": "and", "conditions": []}, {"hr.md", "secret.md", "plain.md"}),
    ],
)
def test_metadata_condition_on_tags(client, account_a, kb, condition, expected):
    body = {
        "knowledge_id": str(kb["general"].pk),
        "query": QUERY,
        "retrieval_setting": {"top_k": 10, "score_threshold": 0.0},
        "metadata_condition": condition,
    }
    response = _post(client, body, make_api_key(account_a))
    assert _titles(response) == expected
    for record in response.json()["records"]:
        assert (
            record["metadata"]["tags"]
            == {"hr.md": ["HR"], "secret.md": ["confidential"], "plain.md": []}[record["title"]]
        )


def test_the_accounts_excluded_tags_apply(client, account_a, kb):
    with account_context(account_a):
        retrieval_exclude_tags_set(account=account_a, actor=None, exclude_tags=["confidential"])
    body = {
        "knowledge_id": str(kb["general"].pk),
        "query": QUERY,
        "retrieval_setting": {"top_k": 10, "score_threshold": 0.0},
        "metadata_condition": {
            "conditions": [{"name": "tags", "comparison_operator": "contains", "value": "confidential"}]
        },
    }
    assert _titles(_post(client, body, make_api_key(account_a))) == set()
    del body["metadata_condition"]
    assert _titles(_post(client, body, make_api_key(account_a))) == {"hr.md", "plain.md"}


@pytest.mark.parametrize(
    "condition",
    [
        {"conditions": [{"name": "category", "comparison_operator": "contains", "value": "x"}]},
        {"conditions": [{"name": "tags", "comparison_operator": "before", "value": "2026-01-01"}]},
        {"conditions": [{"name": "tags", "comparison_operator": "contains"}]},
        {
            "logical_operator": "and",
            "conditions": [
                {"name": "tags", "comparison_operator": "contains", "value": "a"},
                {"name": "tags", "comparison_operator": "contains", "value": "b"},
            ],
        },
        {
            "logical_operator": "or",
            "conditions": [
                {"name": "tags", "comparison_operator": "contains", "value": "a"},
                {"name": "tags", "comparison_operator": "not contains", "value": "b"},
            ],
        },
        {"logical_operator": "xor", "conditions": []},
        {"conditions": [{"name": "tags", "comparison_operator": "contains", "value": "a,b"}]},
        "tags",
    ],
)
def test_conditions_that_cannot_be_answered_exactly_are_400(client, account_a, kb, condition):
    body = {
        "knowledge_id": str(kb["general"].pk),
        "query": QUERY,
        "retrieval_setting": {"top_k": 3, "score_threshold": 0.5},
        "metadata_condition": condition,
    }
    response = _post(client, body, make_api_key(account_a))
    assert response.status_code == 400, response.content
    assert response.json()["error_code"] == 400 and response.json()["error_msg"]


@pytest.mark.parametrize(
    "body",
    [
        {"query": QUERY, "retrieval_setting": {"top_k": 3, "score_threshold": 0.5}},
        {"knowledge_id": "1", "retrieval_setting": {"top_k": 3, "score_threshold": 0.5}},
        {"knowledge_id": "1", "query": QUERY},
        {"knowledge_id": "1", "query": QUERY, "retrieval_setting": {"top_k": 0, "score_threshold": 0.5}},
        {"knowledge_id": "1", "query": QUERY, "retrieval_setting": {"top_k": 3, "score_threshold": 1.5}},
        {"knowledge_id": "1", "query": QUERY, "retrieval_setting": {"top_k": "many", "score_threshold": 0.5}},
    ],
)
def test_malformed_bodies_are_400_in_difys_shape(client, account_a, fake_llm, body):
    response = _post(client, body, make_api_key(account_a))
    assert response.status_code == 400 and set(response.json()) == {"error_code", "error_msg"}
    assert response.json()["error_code"] == 400


def test_authorization_errors_are_1001_and_1002(client, account_a, kb):
    body = {
        "knowledge_id": str(kb["general"].pk),
        "query": QUERY,
        "retrieval_setting": {"top_k": 2, "score_threshold": 0.5},
    }
    for authorization in ("", "Token abc", "Bearer"):
        response = _post(client, body, authorization=authorization)
        assert response.status_code == 401 and response.json()["error_code"] == 1001, authorization
        assert "Bearer" in response.json()["error_msg"]
    response = _post(client, body, authorization="Bearer gw_not_a_key")
    assert response.status_code == 401 and response.json() == {
        "error_code": 1002,
        "error_msg": "Authorization failed: the API key is unknown or has been revoked.",
    }
    # A signed-in session is not how Dify calls: the key is required.
    client.force_login(account_a.test_owner)
    assert _post(client, body, authorization="").json()["error_code"] == 1001


def test_another_accounts_or_a_restricted_collection_is_2001(client, account_a, account_b, kb):
    body = {"query": QUERY, "retrieval_setting": {"top_k": 2, "score_threshold": 0.0}}
    key_b = make_api_key(account_b)
    with account_context(account_b):
        general_b = collection_default_ensure(account=account_b)
    for knowledge_id in (str(kb["general"].pk), "AAA-BBB-CCC", "0", str(10**20)):
        response = _post(client, {**body, "knowledge_id": knowledge_id}, key_b)
        assert response.status_code == 404 and response.json()["error_code"] == 2001, knowledge_id
    assert _titles(_post(client, {**body, "knowledge_id": str(general_b.pk)}, key_b)) == set()
    # Restricted to members: a key without access does not see it exists.
    key_a = make_api_key(account_a)
    with account_context(account_a):
        secret = collection_create(account=account_a, actor=account_a.test_owner, name="Board", restricted=True)
    response = _post(client, {**body, "knowledge_id": str(secret.pk)}, key_a)
    assert response.status_code == 404 and response.json()["error_code"] == 2001
    with account_context(account_b):  # the refusals charged nothing: only B's own search was
        assert CreditLedgerEntry.objects.for_account(account_b).filter(reference="search").count() == 1


def test_not_enough_credits_is_402_with_nothing_retrieved(client, account_a, kb):
    from billing.models import AccountBalance

    with dangerously_bypass_tenancy(reason="test: empty the balance"):
        AccountBalance.all_accounts.filter(account=account_a).update(balance=0)
    body = {
        "knowledge_id": str(kb["general"].pk),
        "query": QUERY,
        "retrieval_setting": {"top_k": 2, "score_threshold": 0.5},
    }
    response = _post(client, body, make_api_key(account_a))
    assert response.status_code == 402 and response.json()["error_code"] == 402


def test_tags_set_on_a_document_later_steer_dify_too(client, account_a, kb):
    with account_context(account_a):
        document_tags_set(account=account_a, actor=None, document=kb["documents"]["plain.md"], tags=["hr"])
    body = {
        "knowledge_id": str(kb["general"].pk),
        "query": QUERY,
        "retrieval_setting": {"top_k": 10, "score_threshold": 0.0},
        "metadata_condition": {"conditions": [{"name": ["tags"], "comparison_operator": "contains", "value": "HR"}]},
    }
    assert _titles(_post(client, body, make_api_key(account_a))) == {"hr.md", "plain.md"}
