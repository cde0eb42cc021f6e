"""Every selector of sources, asked by account B for account A's rows: nothing, or 404; and
row-level security alone (the application lock left open) shows B none of A's rows."""

import pytest

from core.tenancy import account_context
from sources import selectors
from sources.errors import SourceNotFound
from sources.models import Source, SourceItem, SourceSync


@pytest.fixture
def a_rows(api_a, handbook, commit_and_run, account_a):
    response = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": handbook.url("/docs/")}))
    with account_context(account_a):
        source = Source.objects.for_account(account_a).get(pk=response.json()["id"])
        items = list(SourceItem.objects.for_account(account_a).filter(source=source))
        syncs = list(SourceSync.objects.for_account(account_a).filter(source=source))
    return source, items, syncs


def test_account_b_sees_nothing_of_account_a(a_rows, account_a, account_b):
    source, items, syncs = a_rows
    document_ids = [i.document_id for i in items]
    with account_context(account_a):
        assert selectors.source_access_by_id(account=account_a, source_id=source.pk).document_count == 4
        assert len(selectors.sources_of_documents(account=account_a, document_ids=document_ids)) == 4
    with account_context(account_b):
        assert list(selectors.source_list(account=account_b)) == []
        with pytest.raises(SourceNotFound):
            selectors.source_access_by_id(account=account_b, source_id=source.pk)
        assert selectors.syncs_by_id(account=account_b, ids=[s.pk for s in syncs]) == {}
        assert list(selectors.sync_list(account=account_b, source=source)) == []
        assert selectors.sources_of_documents(account=account_b, document_ids=document_ids) == {}
        # The database's own lock: B's context reads none of A's rows even when asked by A's id.
        assert not Source.objects.for_account(account_a).exists()
        assert not SourceItem.objects.for_account(account_a).exists()
        assert not SourceSync.objects.for_account(account_a).exists()


@pytest.mark.parametrize("bad", ["abc", "-1", "0", "99999999999999999999", None, ""])
def test_malformed_ids_are_not_found(account_a, bad):
    with account_context(account_a), pytest.raises(SourceNotFound):
        selectors.source_access_by_id(account=account_a, source_id=bad)


def test_the_list_is_a_fixed_number_of_queries(api_a, handbook, commit_and_run, django_assert_max_num_queries):
    for path in ("/docs/", "/docs/leave", "/docs/expenses"):
        commit_and_run(lambda path=path: api_a.post("/api/v1/sources/", {"kind": "web", "url": handbook.url(path)}))
    with django_assert_max_num_queries(12):
        listed = api_a.get("/api/v1/sources/").json()["results"]
    assert len(listed) == 3 and all(s["last_sync"] for s in listed)
