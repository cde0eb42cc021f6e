"""Support staff can support: the account page shows balance, recent
ledger, documents with status and error, keys and members; accounts are found by owner or
member email; the ledger filters by account; a key's page revokes it; a document's failure
reason is visible. Each as a superuser and as staff with fewer rights (no 500s, refused
actions change nothing)."""

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.urls import reverse

from accounts.models import ApiKey, Role
from accounts.tests.factories import add_member, make_account, make_api_key, make_user, staff_with
from billing.models import AccountBalance, CreditLedgerEntry
from billing.services import credits_grant
from core.tenancy import account_context
from documents.models import Document

pytestmark = pytest.mark.django_db


def OUR_MODELS():
    return [m for m in admin.site._registry if m._meta.app_label in {"accounts", "billing", "documents", "chat"}]


@pytest.fixture
def superuser_client(client):
    client.force_login(make_user("root@groundwork.test", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def failed_document(account_a, fake_llm, upload_and_ingest, settings):
    settings.EMBEDDING_DIMENSIONS = 768  # the provider answers 384: ingestion fails with a reason
    document = upload_and_ingest(account_a, "dims.txt", b"Some text to embed.")
    assert document.status == "failed"
    return document


@pytest.fixture
def ready_document(account_a, fake_llm, upload_and_ingest):
    document = upload_and_ingest(account_a, "handbook.txt", b"Our office opens at nine. Lunch is at noon.")
    assert document.status == "ready"
    return document


def _key(account):
    with account_context(account):
        return ApiKey.objects.for_account(account).get()


def test_account_page_shows_balance_ledger_documents_keys_and_members(
    superuser_client, account_a, owner_a, failed_document, django_assert_max_num_queries
):
    member = add_member(account_a, make_user("colleague@acme.test"), role=Role.MEMBER)
    make_api_key(account_a, name="zapier-sync")
    with account_context(account_a):
        credits_grant(account=account_a, amount=1234, reason="support goodwill")
    with django_assert_max_num_queries(40):
        response = superuser_client.get(f"/admin/accounts/account/{account_a.pk}/change/")
    page = response.content.decode()
    assert response.status_code == 200
    with account_context(account_a):
        balance = AccountBalance.objects.for_account(account_a).get().balance
    assert f"<strong>{balance:,} credits</strong>" in page
    assert "+1,234" in page and "support goodwill" in page  # the latest ledger entries
    assert f"?account={account_a.pk}" in page  # the whole ledger, filtered
    assert "dims.txt" in page and "Failed" in page and "768" in page  # documents, status, reason
    assert "zapier-sync" in page and "revoke…" in page  # keys, with the way to revoke
    assert owner_a.email in page and member.email in page  # members


def test_account_balance_and_owners_in_the_list(superuser_client, account_a, account_b, owner_a):
    page = superuser_client.get("/admin/accounts/account/").content.decode()
    assert owner_a.email in page and "Beta" in page


@pytest.mark.parametrize("who", ["owner", "member"])
def test_accounts_are_found_by_owner_or_member_email(superuser_client, account_a, account_b, owner_a, who):
    email = owner_a.email if who == "owner" else add_member(account_a, make_user("quiet.member@acme.test")).email
    page = superuser_client.get("/admin/accounts/account/", {"q": email}).content.decode()
    assert "Acme" in page and "Beta" not in page


def test_the_ledger_filters_by_account(superuser_client, account_a, account_b):
    with account_context(account_b):
        credits_grant(account=account_b, amount=777, reason="only beta")
    url = "/admin/billing/creditledgerentry/"
    everything = superuser_client.get(url).content.decode()
    assert "Acme" in everything and "only beta" in everything
    for value in (account_b.pk, account_b.slug, "beta"):
        page = superuser_client.get(url, {"account": value}).content.decode()
        assert "only beta" in page and ">Acme<" not in page, value
    page = superuser_client.get(url, {"account": account_a.pk}).content.decode()
    assert "only beta" not in page
    assert superuser_client.get(url, {"account": "nobody\x01"}).status_code == 200


def test_a_keys_page_revokes_it(superuser_client, account_a):
    raw = make_api_key(account_a)
    key = _key(account_a)
    page = superuser_client.get(f"/admin/accounts/apikey/{key.pk}/change/").content.decode()
    revoke_url = reverse("admin:accounts_apikey_revoke", args=[key.pk])
    assert revoke_url in page and "Revoke this key" in page
    assert superuser_client.get(revoke_url).status_code == 405  # POST only
    response = superuser_client.post(revoke_url, follow=True)
    assert response.status_code == 200 and "Revoked" in response.content.decode()
    assert _key(account_a).revoked_at is not None
    assert "Revoke this key" not in response.content.decode()
    assert superuser_client.get("/api/v1/account/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert LogEntry.objects.filter(object_id=str(key.pk), change_message__contains="Revoked").exists()


def test_a_documents_failure_reason_is_visible(superuser_client, failed_document):
    listing = superuser_client.get("/admin/documents/document/", {"status__exact": "failed"}).content.decode()
    assert "dims.txt" in listing and "embedding_dimension" in listing and "768" in listing
    page = superuser_client.get(f"/admin/documents/document/{failed_document.pk}/change/").content.decode()
    assert failed_document.error in page.replace("&#x27;", "'")


def test_reindex_needs_its_permission_and_is_recorded(client, account_a, ready_document, queue):
    url = "/admin/documents/document/"
    data = {"action": "reindex", "_selected_action": [ready_document.pk]}
    client.force_login(staff_with("documents.view_document"))
    client.post(url, data, follow=True)

    def revision():
        with account_context(account_a):
            return Document.objects.for_account(account_a).get(pk=ready_document.pk).revision

    assert revision() == ready_document.revision

    staff = staff_with("documents.view_document", "documents.change_document")
    client.force_login(staff)
    response = client.post(url, data, follow=True)
    assert "Reindex queued for 1" in response.content.decode()
    assert revision() == ready_document.revision + 1
    assert LogEntry.objects.filter(user=staff, object_id=str(ready_document.pk)).exists()


def test_account_reindex_and_delete_need_their_permissions(client, account_a, ready_document, queue):
    client.force_login(staff_with("accounts.view_account", "documents.view_document"))
    client.post("/admin/accounts/account/", {"action": "reindex_accounts", "_selected_action": [account_a.pk]})
    client.post("/admin/documents/document/", {"action": "remove", "_selected_action": [ready_document.pk]})
    with account_context(account_a):
        assert Document.objects.for_account(account_a).get(pk=ready_document.pk).status == "ready"
        assert not account_a.reindexrun_set.exists()

    staff = staff_with(
        "accounts.view_account", "documents.add_reindexrun", "documents.delete_document", "documents.view_document"
    )
    client.force_login(staff)
    client.post("/admin/accounts/account/", {"action": "reindex_accounts", "_selected_action": [account_a.pk]})
    client.post("/admin/documents/document/", {"action": "remove", "_selected_action": [ready_document.pk]})
    with account_context(account_a):
        assert Document.objects.for_account(account_a).get(pk=ready_document.pk).status == "deleting"
        assert account_a.reindexrun_set.get().created_by == staff
    assert LogEntry.objects.filter(user=staff).count() == 2


def test_limited_staff_see_only_what_they_may(client, account_a, owner_a, failed_document):
    make_api_key(account_a, name="zapier-sync")
    client.force_login(staff_with("accounts.view_account"))
    response = client.get(f"/admin/accounts/account/{account_a.pk}/change/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "credits</strong>" not in page and "dims.txt" not in page and "zapier-sync" not in page
    listing = client.get("/admin/accounts/account/").content.decode()
    assert "Grant credits" not in listing and "Reindex all documents" not in listing
    assert client.get("/admin/billing/creditledgerentry/").status_code == 403
    assert client.get(f"/admin/accounts/apikey/{_key(account_a).pk}/change/").status_code == 403


def test_every_admin_page_renders_for_a_superuser(superuser_client, account_a, failed_document):
    make_api_key(account_a)
    with account_context(account_a):
        entry = CreditLedgerEntry.objects.for_account(account_a).first()
    assert entry is not None
    for model in OUR_MODELS():
        opts = model._meta
        changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        assert superuser_client.get(changelist).status_code == 200, changelist
        assert superuser_client.get(changelist, {"q": "acme"}).status_code == 200, changelist
        with account_context(account_a):  # every row here is account A's, or no tenant's
            obj = model._default_manager.first()
        if obj is not None:
            change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
            assert superuser_client.get(change).status_code == 200, change


def test_view_only_staff_render_every_page_they_may_see(client, account_a, failed_document):
    """A staff user with every view permission (and nothing else): every list and page
    renders, and offers no action."""
    views = Permission.objects.filter(codename__startswith="view_")
    staff = make_user(is_staff=True)
    staff.user_permissions.add(*views)
    client.force_login(staff)
    make_account("Gamma")
    for model in OUR_MODELS():
        opts = model._meta
        response = client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
        assert response.status_code == 200, opts
        assert 'name="action"' not in response.content.decode(), opts
    page = client.get(f"/admin/accounts/account/{account_a.pk}/change/").content.decode()
    assert "credits</strong>" in page and "dims.txt" in page


def test_change_rights_on_users_do_not_hand_out_rights(client):
    staff = staff_with("accounts.view_user", "accounts.change_user")
    client.force_login(staff)
    response = client.post(
        f"/admin/accounts/user/{staff.pk}/change/",
        {
            "email": staff.email,
            "full_name": "Me",
            "is_active": "on",
            "is_staff": "on",
            "is_superuser": "on",
            "user_permissions": list(Permission.objects.values_list("pk", flat=True)),
            "last_login_0": "",
            "last_login_1": "",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
    )
    assert response.status_code in (200, 302)
    staff.refresh_from_db()
    assert staff.full_name == "Me"  # the form saved
    assert not staff.is_superuser and staff.user_permissions.count() == 2


def test_role_changes_and_removals_in_the_admin_reach_open_sockets(
    superuser_client, account_a, django_capture_on_commit_callbacks
):
    import asyncio

    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from accounts.models import Membership
    from core import sockets

    layer = get_channel_layer()
    member = add_member(account_a, role=Role.MEMBER)
    with account_context(account_a):
        membership = Membership.objects.for_account(account_a).get(user=member)
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(sockets.member_group(account_a.pk, member.pk), channel)

    async def next_message():
        return await asyncio.wait_for(layer.receive(channel), 5)

    with django_capture_on_commit_callbacks(execute=True):
        response = superuser_client.post(
            f"/admin/accounts/membership/{membership.pk}/change/",
            {"user": member.pk, "account": account_a.pk, "role": Role.ADMIN},
        )
    assert response.status_code == 302
    assert async_to_sync(next_message)()["type"] == sockets.CHANGED
    with django_capture_on_commit_callbacks(execute=True):
        response = superuser_client.post(f"/admin/accounts/membership/{membership.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert async_to_sync(next_message)()["type"] == sockets.REVOKED
