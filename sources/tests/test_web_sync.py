"""A web source end to end against a site on loopback: the first sync, then re-syncs that
see pages changed, removed and added, with the ledger charging only what changed."""

from billing.models import CreditLedgerEntry
from core.tenancy import account_context
from documents.models import Chunk, Document
from sources.models import SourceItem
from sources.tests.site import page


def _embedding_charges(account) -> int:
    with account_context(account):
        return CreditLedgerEntry.objects.for_account(account).filter(kind="embedding").count()


def _texts(account) -> dict[str, str]:
    with account_context(account):
        docs = Document.objects.for_account(account).visible().order_by("pk")
        return {
            d.name: " ".join(c.content for c in Chunk.objects.for_account(account).filter(document=d)) for d in docs
        }


def _create(api, commit_and_run, url, **extra):
    response = commit_and_run(lambda: api.post("/api/v1/sources/", {"kind": "web", "url": url, **extra}))
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_first_sync_reads_the_page_and_same_site_pages_under_its_path(api_a, handbook, commit_and_run, account_a):
    created = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": handbook.url("/docs/")}))
    assert created.status_code == 201
    body = created.json()
    assert set(body) >= {"id", "kind", "url", "status", "error", "last_synced_at", "document_count", "last_sync"}
    assert body["kind"] == "web" and body["url"] == handbook.url("/docs/")
    source = api_a.get(f"/api/v1/sources/{body['id']}/").json()
    assert source["status"] == "idle" and source["error"] == "" and source["last_synced_at"]
    assert source["document_count"] == 4
    assert source["last_sync"] == {"added": 4, "updated": 0, "removed": 0, "unchanged": 0}
    texts = _texts(account_a)
    assert sorted(texts) == ["Expenses.md", "Handbook.md", "Leave.md", "Security.md"]
    assert "twenty-eight days of paid holiday" in texts["Leave.md"]
    assert handbook.fetched("/blog/news") == 0  # outside /docs/
    with account_context(account_a):
        assert Document.objects.for_account(account_a).filter(status="ready").count() == 4
    assert _embedding_charges(account_a) == 4


def test_resync_charges_only_changed_pages_and_removes_gone_ones(api_a, handbook, commit_and_run, account_a):
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"))
    charges = _embedding_charges(account_a)
    with account_context(account_a):
        leave_doc = SourceItem.objects.for_account(account_a).get(key=handbook.url("/docs/leave")).document_id
    # One page changed, one removed (and unlinked), one added.
    handbook.set("/docs/leave", page("Leave", "Everyone has thirty days of paid holiday a year."))
    del handbook.pages["/docs/security"]
    handbook.set(
        "/docs/", page("Handbook", "The staff handbook, revised.", ["/docs/leave", "/docs/expenses", "/docs/travel"])
    )
    handbook.set("/docs/travel", page("Travel", "Book trains over flights for trips under five hours."))
    response = commit_and_run(lambda: api_a.post(f"/api/v1/sources/{source_id}/sync/"))
    assert response.status_code == 202
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["last_sync"] == {"added": 1, "updated": 2, "removed": 1, "unchanged": 1}, source
    assert source["document_count"] == 4
    texts = _texts(account_a)
    assert sorted(texts) == ["Expenses.md", "Handbook.md", "Leave.md", "Travel.md"]
    assert "thirty days" in texts["Leave.md"] and "twenty-eight" not in texts["Leave.md"]
    # Charged for the index, the changed page and the new one; not for the unchanged page.
    assert _embedding_charges(account_a) == charges + 3
    with account_context(account_a):
        # The changed page's document is the same document, at its next revision.
        leave = Document.objects.for_account(account_a).get(pk=leave_doc)
        assert leave.revision == 2 and leave.status == "ready" and leave.name == "Leave.md"
        assert SourceItem.objects.for_account(account_a).get(key=handbook.url("/docs/leave")).document_id == leave_doc
    # The unchanged page was asked for with its ETag and answered 304: nothing downloaded.
    assert handbook.fetched("/docs/expenses", 304) == 1


def test_nothing_changed_costs_nothing(api_a, handbook, commit_and_run, account_a):
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"))
    charges = _embedding_charges(account_a)
    commit_and_run(lambda: api_a.post(f"/api/v1/sources/{source_id}/sync/"))
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["last_sync"] == {"added": 0, "updated": 0, "removed": 0, "unchanged": 4}
    assert _embedding_charges(account_a) == charges
    assert all(handbook.fetched(p, 304) == 1 for p in ("/docs/", "/docs/leave", "/docs/expenses", "/docs/security"))


def test_without_validators_the_same_text_is_unchanged_by_its_hash(api_a, handbook, commit_and_run, account_a):
    handbook.validators = False
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"))
    charges = _embedding_charges(account_a)
    handbook.set("/docs/expenses", page("Expenses", "Claims need receipts, a manager's approval and a date."))
    commit_and_run(lambda: api_a.post(f"/api/v1/sources/{source_id}/sync/"))
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["last_sync"] == {"added": 0, "updated": 1, "removed": 0, "unchanged": 3}
    assert _embedding_charges(account_a) == charges + 1
    assert handbook.fetched("/docs/leave", 200) == 2  # downloaded again, but not re-embedded


def test_max_pages_bounds_the_crawl(api_a, handbook, commit_and_run):
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"), max_pages=2)
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["document_count"] == 2 and source["max_pages"] == 2
    assert handbook.fetched("/docs/security") == 0


def test_robots_txt_is_honoured(api_a, handbook, commit_and_run):
    handbook.robots = "User-agent: *\nDisallow: /docs/security\n"
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"))
    assert api_a.get(f"/api/v1/sources/{source_id}/").json()["document_count"] == 3
    assert handbook.fetched("/docs/security") == 0


def test_robots_txt_disallowing_the_start_fails_the_source_with_its_reason(api_a, handbook, commit_and_run):
    handbook.robots = "User-agent: *\nDisallow: /docs/\n"
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"))
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["status"] == "failed" and source["document_count"] == 0
    assert "robots.txt" in source["error"] and "disallows /docs/" in source["error"]
    assert source["syncs"][0]["status"] == "failed" and source["syncs"][0]["error"] == source["error"]


def test_a_missing_start_page_fails_with_the_http_status(api_a, site, commit_and_run):
    source_id = _create(api_a, commit_and_run, site.url("/nothing/here"))
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["status"] == "failed"
    assert source["error"].startswith(f"HTTP 404 at {site.url('/nothing/here')}")


def test_a_failed_source_syncs_again_once_fixed(api_a, site, commit_and_run):
    source_id = _create(api_a, commit_and_run, site.url("/wiki/"))
    assert api_a.get(f"/api/v1/sources/{source_id}/").json()["status"] == "failed"
    site.set("/wiki/", page("Wiki", "The wiki is back."))
    commit_and_run(lambda: api_a.post(f"/api/v1/sources/{source_id}/sync/"))
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["status"] == "idle" and source["error"] == "" and source["document_count"] == 1
    assert [s["status"] for s in source["syncs"]] == ["succeeded", "failed"]


def test_a_linked_page_that_fails_is_kept_and_reported(api_a, handbook, commit_and_run):
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"))
    handbook.redirects["/docs/leave"] = handbook.url("/docs/leave")  # a redirect loop
    commit_and_run(lambda: api_a.post(f"/api/v1/sources/{source_id}/sync/"))
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["status"] == "idle" and source["document_count"] == 4
    assert source["last_sync"]["removed"] == 0
    assert any("redirects more than" in p for p in source["syncs"][0]["problems"])


def test_not_enough_credits_fails_the_sync_with_the_reason(api_a, handbook, commit_and_run, account_a):
    from billing.selectors import balance_get
    from billing.services import credits_debit

    with account_context(account_a):
        credits_debit(account=account_a, tokens=balance_get(account=account_a) - 10, key="spend", kind="chat")
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"))
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["status"] == "failed" and source["document_count"] == 0
    assert "credits" in source["error"].lower(), source["error"]


def test_a_source_whose_creator_left_still_syncs(client, account_a, handbook, commit_and_run, fake_llm, queue):
    from accounts.models import Membership, Role
    from accounts.tests.factories import add_member
    from sources.models import Source

    member = add_member(account_a, role=Role.MEMBER)
    client.force_login(member)
    created = commit_and_run(
        lambda: client.post(
            "/api/v1/sources/", {"kind": "web", "url": handbook.url("/docs/")}, content_type="application/json"
        )
    )
    with account_context(account_a):
        Membership.objects.for_account(account_a).filter(user=member).delete()
        source = Source.objects.for_account(account_a).get(pk=created.json()["id"])
    handbook.set("/docs/leave", page("Leave", "Everyone has thirty days of paid holiday a year."))
    from sources.services import source_sync_request

    commit_and_run(lambda: _in_context(account_a, lambda: source_sync_request(account=account_a, source=source)))
    with account_context(account_a):
        source.refresh_from_db()
        sync = source.syncs.order_by("-pk").first()
    assert source.status == "idle" and (sync.added, sync.updated, sync.unchanged) == (0, 1, 3), source.error


def _in_context(account, fn):
    with account_context(account):
        return fn()


def test_documents_name_their_source_and_carry_its_tags(api_a, handbook, commit_and_run, account_a, upload_and_ingest):
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"), tags=["handbook", "HR"])
    upload_and_ingest(account_a, "notes.txt", b"Notes uploaded by hand.", "text/plain")
    documents = api_a.get("/api/v1/documents/").json()["results"]
    by_name = {d["name"]: d for d in documents}
    assert by_name["notes.txt"]["source"] is None and by_name["notes.txt"]["tags"] == []
    leave = by_name["Leave.md"]
    assert leave["source"] == {"id": source_id, "url": handbook.url("/docs/leave")}
    assert leave["tags"] == ["handbook", "HR"]
    assert api_a.get(f"/api/v1/documents/{leave['id']}/").json()["source"]["id"] == source_id
    # A person's tags on a source's document survive the page changing (its next revision).
    response = api_a.client.patch(
        f"/api/v1/documents/{leave['id']}/",
        {"tags": ["handbook", "checked"]},
        content_type="application/json",
        **api_a.headers,
    )
    assert response.status_code == 200, response.content
    handbook.set("/docs/leave", page("Leave", "Everyone has thirty days of paid holiday a year."))
    commit_and_run(lambda: api_a.post(f"/api/v1/sources/{source_id}/sync/"))
    after = api_a.get(f"/api/v1/documents/{leave['id']}/").json()
    assert after["tags"] == ["handbook", "checked"] and after["revision"] == 2 and after["status"] == "ready"


def test_another_accounts_documents_never_show_this_accounts_source(api_a, api_b, handbook, commit_and_run):
    _create(api_a, commit_and_run, handbook.url("/docs/"))
    assert api_b.get("/api/v1/documents/").json()["results"] == []
