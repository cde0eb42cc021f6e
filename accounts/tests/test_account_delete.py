"""Deleting an account: owners only, after typing the account's
name, on the Team page or DELETE /api/v1/account/. Keys, members and invitations go at once;
a job purges documents (and their files), conversations, collections and budgets; the credit
ledger, the balance row and the audit log are kept with the account's tombstone, which no
session, key or invitation link resolves into. Other accounts are untouched."""

from __future__ import annotations

import re

import pytest
from django.core.files.storage import default_storage

from accounts import services
from accounts.models import Account, ApiKey, Invitation, Membership, Role
from accounts.selectors import membership_list_for_user
from accounts.tests.factories import PASSWORD, add_member, make_account, make_api_key, make_user
from audit.models import AuditEntry
from billing.budgets import budget_set
from billing.models import AccountBalance, BillingSettings, Budget, CreditHold, CreditLedgerEntry, HoldStatus
from billing.services import credits_hold
from chat.models import Conversation, Message
from core.tenancy import account_context
from documents.models import Chunk, Collection, Document, EmbeddingBatch, IngestionLane

NOTES = b"# Notes\n\nThe quarterly offsite is in Lisbon. Bring a passport and a warm jumper."


@pytest.fixture
def team(account_a, owner_a, fake_llm, upload_and_ingest, django_capture_on_commit_callbacks, mailoutbox):
    """Account A with an admin, a member, a viewer, a key, a pending invitation, a document
    (ingested: chunks and a stored file), a conversation, an open hold and a budget."""
    admin = add_member(account_a, make_user("admin@acme.test"), role=Role.ADMIN)
    member = add_member(account_a, make_user("member@acme.test"))
    viewer = add_member(account_a, make_user("viewer@acme.test"), role=Role.VIEWER)
    raw_key = make_api_key(account_a, "sync")
    document = upload_and_ingest(account_a, "notes.md", NOTES, "text/markdown")
    with account_context(account_a), django_capture_on_commit_callbacks(execute=True):
        services.member_invite(account=account_a, actor=owner_a, email="newhire@acme.test")
        conversation = Conversation.objects.for_account(account_a).create(
            account=account_a, user=member, title="Offsite"
        )
        Message.objects.for_account(account_a).create(
            account=account_a, conversation=conversation, role="user", content="Where is the offsite?"
        )
        hold = credits_hold(account=account_a, amount=500, key="chat:test-hold", user=member)
        budget_set(account=account_a, actor=owner_a, period="day", limit=1000, user_id=member.pk)
        BillingSettings.objects.for_account(account_a).create(
            account=account_a, contact_email="billing@acme.test", low_balance_threshold=100
        )
    link = re.search(r"https?://\S+/invitations/\S+/", mailoutbox[-1].body).group(0)
    return dict(
        account=account_a,
        owner=owner_a,
        admin=admin,
        member=member,
        viewer=viewer,
        raw_key=raw_key,
        document=document,
        hold=hold,
        invitation_link=link,
    )


def _counts(account) -> dict:
    with account_context(account):
        return {
            model.__name__: model.objects.for_account(account).count()
            for model in (
                Document,
                Chunk,
                EmbeddingBatch,
                IngestionLane,
                Collection,
                Conversation,
                Message,
                Budget,
                BillingSettings,
                Membership,
                ApiKey,
                CreditLedgerEntry,
                AccountBalance,
                AuditEntry,
            )
        }


def _delete_on_page(client, user, confirm, django_capture_on_commit_callbacks):
    client.force_login(user)
    with django_capture_on_commit_callbacks(execute=True):
        return client.post("/team/delete/", {"confirm": confirm})


def test_owner_deletes_the_account_and_a_job_purges_it(
    client, team, account_b, run_jobs, django_capture_on_commit_callbacks
):
    account, owner = team["account"], team["owner"]
    other_key = make_api_key(account_b, "beta-sync")
    before_b = _counts(account_b)
    ledger_before = _counts(account)["CreditLedgerEntry"]
    stored = team["document"].file.name
    assert default_storage.exists(stored)

    response = _delete_on_page(client, owner, "Acme", django_capture_on_commit_callbacks)
    assert response.status_code == 302 and response["Location"] == "/"
    account.refresh_from_db()
    assert account.deleted_at is not None

    # At once: the key answers 401, nobody is a member, the invitation is gone, every document
    # is hidden, the open hold is released.
    assert client.get("/api/v1/account/", HTTP_AUTHORIZATION=f"Bearer {team['raw_key']}").status_code == 401
    with account_context(account):
        assert not Membership.objects.for_account(account).exists()
        assert not Invitation.objects.for_account(account).filter(accepted_at__isnull=True).exists()
        assert all(k.revoked_at for k in ApiKey.objects.for_account(account))
        assert not Document.objects.for_account(account).visible().exists()
        assert CreditHold.objects.for_account(account).get(pk=team["hold"].pk).status == HoldStatus.RELEASED

    run_jobs()
    counts = _counts(account)
    for purged in (
        "Document",
        "Chunk",
        "EmbeddingBatch",
        "IngestionLane",
        "Collection",
        "Conversation",
        "Message",
        "Budget",
        "BillingSettings",
        "Membership",
    ):
        assert counts[purged] == 0, purged
    assert not default_storage.exists(stored)
    assert (
        not default_storage.exists(f"accounts/{account.pk}/documents/")
        or default_storage.listdir(f"accounts/{account.pk}/documents")[1] == []
    )
    # Kept: the ledger (the hold's release added to it), the balance row, the audit log.
    assert counts["CreditLedgerEntry"] == ledger_before + 1 and counts["AccountBalance"] == 1
    with account_context(account):
        entry = AuditEntry.objects.for_account(account).get(action="account.delete")
        assert entry.actor_id == owner.pk and entry.detail["keys_revoked"] == 1
        assert entry.detail["members_removed"] == 4 and entry.detail["invitations_cancelled"] == 1
        assert AuditEntry.objects.for_account(account).filter(action="document.upload").exists()

    # Other accounts: untouched, and their keys still work.
    assert _counts(account_b) == {**before_b}
    assert client.get("/api/v1/account/", HTTP_AUTHORIZATION=f"Bearer {other_key}").status_code == 200

    # The owner, whose only team it was, lands on "create a team"; pages no longer show it.
    home = client.get("/")
    assert "You are not in any account" in home.content.decode()
    assert client.get("/team/").status_code == 404
    assert client.get("/api/v1/documents/").status_code == 401


def test_the_purge_jobs_run_twice_are_harmless_and_never_touch_a_live_account(
    team, account_b, run_jobs, django_capture_on_commit_callbacks, upload_and_ingest
):
    from billing.jobs import purge_account_budgets
    from chat.jobs import purge_account as purge_conversations
    from documents.jobs import purge_account as purge_documents

    account = team["account"]
    with django_capture_on_commit_callbacks(execute=True):
        services.account_delete(account=account, actor=team["owner"])
    run_jobs()
    after_first = _counts(account)
    for job in (purge_documents, purge_conversations, purge_account_budgets):
        with django_capture_on_commit_callbacks(execute=True):
            job(account_id=account.pk)
    assert _counts(account) == after_first
    # Deleting again is refused (nobody is a member of a deleted account) and changes nothing.
    with pytest.raises(services.AccountError), django_capture_on_commit_callbacks(execute=True):
        services.account_delete(account=Account.objects.get(pk=account.pk), actor=team["owner"])
    assert _counts(account) == after_first

    live = upload_and_ingest(account_b, "beta.md", b"# Beta\n\nBeta keeps its plants by the window.", "text/markdown")
    for job in (purge_documents, purge_conversations, purge_account_budgets):
        with django_capture_on_commit_callbacks(execute=True):
            job(account_id=account_b.pk)
    with account_context(account_b):
        assert Document.objects.for_account(account_b).filter(pk=live.pk).exists()
    assert default_storage.exists(live.file.name)


def test_the_deleting_owner_lands_in_their_next_team(client, team, django_capture_on_commit_callbacks):
    other = make_account("Zeta", owner=team["owner"])
    response = _delete_on_page(client, team["owner"], "Acme", django_capture_on_commit_callbacks)
    assert response.status_code == 302
    home = client.get("/")
    assert home.status_code == 200 and home.context["current_account"].pk == other.pk


def test_members_log_in_to_their_next_team_or_to_create_one(client, team, django_capture_on_commit_callbacks):
    elsewhere = make_account("Zeta")
    add_member(elsewhere, team["admin"])
    services.user_last_account_set(user=team["admin"], account_id=team["account"].pk)
    with django_capture_on_commit_callbacks(execute=True):
        services.account_delete(account=team["account"], actor=team["owner"])
    client.post("/login/", {"username": team["admin"].email, "password": PASSWORD})
    assert client.get("/").context["current_account"].pk == elsewhere.pk
    client.logout()
    client.post("/login/", {"username": team["member"].email, "password": PASSWORD})
    assert "You are not in any account" in client.get("/").content.decode()


def test_a_deleted_accounts_invitation_link_is_not_valid(client, team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.account_delete(account=team["account"], actor=team["owner"])
    invitee = make_user("newhire@acme.test")
    client.force_login(invitee)
    path = team["invitation_link"].split("://", 1)[1].split("/", 1)[1]
    assert client.get("/" + path).status_code == 404
    assert client.post("/" + path, {"action": "accept"}).status_code == 404
    assert membership_list_for_user(user=invitee) == []


def test_the_team_page_shows_the_danger_zone_to_owners_only(client, team):
    client.force_login(team["owner"])
    page = client.get("/team/").content.decode()
    assert "Delete this account" in page and "credit ledger" in page and 'name="confirm"' in page
    client.force_login(team["admin"])
    page = client.get("/team/").content.decode()
    assert "Delete this account" not in page and "/team/delete/" not in page


@pytest.mark.parametrize("who", ["admin", "member", "viewer"])
def test_only_owners_may_delete_on_the_page(client, team, who, django_capture_on_commit_callbacks):
    response = _delete_on_page(client, team[who], "Acme", django_capture_on_commit_callbacks)
    assert response.status_code == 403
    assert Account.objects.get(pk=team["account"].pk).deleted_at is None


@pytest.mark.parametrize(
    "typed, error",
    [
        ("", "Type the account's name, “Acme”"),
        ("acme", "does not match the account's name"),
        ("Beta", "does not match the account's name"),
    ],
)
def test_a_wrong_confirmation_is_a_form_error(client, team, typed, error, django_capture_on_commit_callbacks):
    response = _delete_on_page(client, team["owner"], typed, django_capture_on_commit_callbacks)
    assert response.status_code == 400
    (message,) = response.context["delete_form"].errors["confirm"]
    assert error in message
    assert 'id="delete-account"' in response.content.decode() and "errorlist" in response.content.decode()
    assert Account.objects.get(pk=team["account"].pk).deleted_at is None
    assert client.get("/api/v1/account/", HTTP_AUTHORIZATION=f"Bearer {team['raw_key']}").status_code == 200


# --- REST: DELETE /api/v1/account/ -------------------------------------------------------------


def _api_delete(client, data=None, **headers):
    return client.delete("/api/v1/account/", data=data or {}, content_type="application/json", **headers)


def test_api_owner_session_deletes_with_confirm(client, team, run_jobs, django_capture_on_commit_callbacks):
    client.force_login(team["owner"])
    with django_capture_on_commit_callbacks(execute=True):
        response = _api_delete(client, {"confirm": "Acme"})
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["id"] == team["account"].pk and body["status"] == "deleted" and body["deleted_at"]
    run_jobs()
    assert _counts(team["account"])["Document"] == 0
    assert client.get("/api/v1/account/").status_code == 401


@pytest.mark.parametrize(
    "data, code, words",
    [
        ({}, "confirmation_required", "`confirm` is missing"),
        ({"confirm": ""}, "confirmation_required", "`confirm` is missing"),
        ({"confirm": 12}, "confirmation_required", "`confirm` is missing"),
        ({"confirm": "Acme Inc"}, "confirmation_mismatch", "does not match"),
    ],
)
def test_api_refuses_a_missing_or_wrong_confirmation(client, team, data, code, words):
    client.force_login(team["owner"])
    response = _api_delete(client, data)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == code and words in error["message"] and error["field"] == "confirm"
    assert Account.objects.get(pk=team["account"].pk).deleted_at is None


def test_api_keys_can_never_delete_the_account(client, team):
    response = _api_delete(client, {"confirm": "Acme"}, HTTP_AUTHORIZATION=f"Bearer {team['raw_key']}")
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert Account.objects.get(pk=team["account"].pk).deleted_at is None


@pytest.mark.parametrize("who", ["admin", "member", "viewer"])
def test_api_refuses_everyone_but_owners(client, team, who):
    client.force_login(team[who])
    response = _api_delete(client, {"confirm": "Acme"})
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert Account.objects.get(pk=team["account"].pk).deleted_at is None


def test_the_service_refuses_non_owners_and_outsiders(team, owner_b):
    for actor in (team["admin"], team["member"], owner_b):
        with pytest.raises(services.AccountError) as refused:
            services.account_delete(account=team["account"], actor=actor)
        assert refused.value.status == 403
    assert Account.objects.get(pk=team["account"].pk).deleted_at is None


def test_an_owner_cannot_delete_another_account(client, team, account_b, owner_b):
    client.force_login(owner_b)
    response = _api_delete(client, {"confirm": "Acme"})
    assert response.status_code == 400  # owner_b's own account is Beta: the name does not match
    assert Account.objects.get(pk=team["account"].pk).deleted_at is None
    assert Account.objects.get(pk=account_b.pk).deleted_at is None


# --- support staff -----------------------------------------------------------------------------


def test_staff_see_a_deleted_account_with_its_ledger_and_audit(
    client, team, account_b, django_capture_on_commit_callbacks
):
    account = team["account"]
    with django_capture_on_commit_callbacks(execute=True):
        services.account_delete(account=account, actor=team["owner"])
    client.force_login(make_user("support@groundwork.test", is_staff=True, is_superuser=True))
    deleted = client.get("/admin/accounts/account/?state=deleted").content.decode()
    assert "Acme" in deleted and "Beta" not in deleted and "deleted 20" in deleted
    active = client.get("/admin/accounts/account/?state=active").content.decode()
    assert "Beta" in active and "Acme (deleted)" not in active
    assert client.get(f"/admin/accounts/account/{account.pk}/change/").status_code == 200
    ledger = client.get(f"/admin/billing/creditledgerentry/?account={account.pk}")
    assert ledger.status_code == 200 and ledger.context["cl"].result_count == _counts(account)["CreditLedgerEntry"]
    audit = client.get(f"/admin/audit/auditentry/?account={account.pk}")
    assert audit.status_code == 200 and "account.delete" in audit.content.decode()


def test_staff_cannot_add_a_member_to_a_deleted_account(client, team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.account_delete(account=team["account"], actor=team["owner"])
    client.force_login(make_user("support@groundwork.test", is_staff=True, is_superuser=True))
    response = client.post(
        "/admin/accounts/membership/add/",
        {"user": team["member"].pk, "account": team["account"].pk, "role": Role.MEMBER},
    )
    assert response.status_code == 200 and "nobody can join it" in response.content.decode()
    assert membership_list_for_user(user=team["member"]) == []
