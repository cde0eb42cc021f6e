"""The audit log: every listed action leaves one entry naming its actor
(a user, an API key or support staff); the database refuses to change or delete an entry;
account B never sees A's entries (API, Team page, raw SQL); members get 403; pages link on."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import DatabaseError, connection, transaction

from accounts import services as accounts_services
from accounts.models import ApiKey, Membership, Role
from accounts.tests.factories import add_member, make_api_key, make_user, staff_with
from audit.models import AuditEntry
from audit.services import audit_record
from billing.services import credits_grant
from core.tenancy import account_context

pytestmark = pytest.mark.django_db


def entries(account, action=None):
    with account_context(account):
        qs = AuditEntry.objects.for_account(account).order_by("created_at", "id")
        return list(qs.filter(action=action) if action else qs)


def only(account, action):
    found = entries(account, action)
    assert len(found) == 1, (action, found)
    return found[0]


def key_header(account, name="integration"):
    return {"HTTP_AUTHORIZATION": f"Bearer {make_api_key(account, name=name)}"}


@pytest.fixture
def funded(account_a):
    with account_context(account_a):
        credits_grant(account=account_a, amount=100_000, reason="tests")
    return account_a


# --- every action, with its actor ---------------------------------------------------------


def test_document_upload_by_key_delete_and_reindex_by_user(client, funded, owner_a):
    headers = key_header(funded, name="ci-bot")
    response = client.post(
        "/api/v1/documents/",
        {"file": SimpleUploadedFile("notes.txt", b"Refunds are paid within 30 days.\n", content_type="text/plain")},
        **headers,
    )
    assert response.status_code == 202, response.content
    doc_id = response.json()["id"]
    upload = only(funded, "document.upload")
    assert (upload.actor_kind, upload.actor_label.split(" ")[0]) == ("key", "ci-bot")
    assert "notes.txt" in upload.target

    client.force_login(owner_a)
    assert client.post(f"/api/v1/documents/{doc_id}/reindex/").status_code == 202
    reindex = only(funded, "document.reindex")
    assert (reindex.actor_kind, reindex.actor_id, reindex.actor_label) == ("user", owner_a.pk, owner_a.email)
    assert client.delete(f"/api/v1/documents/{doc_id}/").status_code == 202
    assert only(funded, "document.delete").actor_kind == "user"
    assert client.post("/api/v1/reindex/").status_code == 202
    assert only(funded, "account.reindex").actor_id == owner_a.pk


def test_team_actions_name_the_user(account_a, owner_a):
    member = add_member(account_a)
    invitee = make_user("new@acme.test")
    with account_context(account_a, user=owner_a):
        key, _ = accounts_services.api_key_create(account=account_a, actor=owner_a, name="zapier")
        accounts_services.api_key_revoke(account=account_a, actor=owner_a, key_id=key.pk)
        membership = Membership.objects.for_account(account_a).get(user=member)
        accounts_services.member_change_role(
            account=account_a, actor=owner_a, membership_id=membership.pk, role=Role.ADMIN
        )
        accounts_services.member_remove(account=account_a, actor=owner_a, membership_id=membership.pk)
        invitation = accounts_services.member_invite(account=account_a, actor=owner_a, email=invitee.email)
    accounts_services.invitation_accept(invitation=invitation, user=invitee, via_link=True)

    for action in ("key.create", "key.revoke", "member.role_change", "member.remove", "invitation.create"):
        entry = only(account_a, action)
        assert (entry.actor_kind, entry.actor_id) == ("user", owner_a.pk), action
    assert "zapier" in only(account_a, "key.revoke").target
    role = only(account_a, "member.role_change")
    assert (role.target, role.detail) == (member.email, {"from": "member", "to": "admin"})
    assert only(account_a, "member.remove").target == member.email
    accepted = only(account_a, "invitation.accept")
    assert (accepted.actor_kind, accepted.actor_id, accepted.target) == ("user", invitee.pk, invitee.email)


def test_team_page_key_creation_and_revocation(client_a, account_a, owner_a):
    assert client_a.post("/team/api-keys/", {"name": "from-the-page"}).status_code in (302, 303)
    assert only(account_a, "key.create").actor_id == owner_a.pk
    with account_context(account_a):
        key = ApiKey.objects.for_account(account_a).get(name="from-the-page")
    assert client_a.post(f"/team/api-keys/{key.pk}/revoke/").status_code in (302, 303)
    assert only(account_a, "key.revoke").actor_kind == "user"


def test_staff_grant_revoke_and_account_page_access(client, account_a):
    staff = staff_with(
        "accounts.view_account", "billing.grant_credits", "accounts.change_apikey", "accounts.view_apikey"
    )
    client.force_login(staff)
    client.post(
        "/admin/accounts/account/",
        {
            "action": "grant_credits",
            "_selected_action": [account_a.pk],
            "apply": "1",
            "amount": 5_000,
            "reason": "annual plan",
        },
        follow=True,
    )
    grant = entries(account_a, "credits.grant")[-1]  # after the account's starting credits
    assert (grant.actor_kind, grant.actor_id, grant.detail["reason"]) == ("staff", staff.pk, "annual plan")

    make_api_key(account_a)
    with account_context(account_a):
        key_id = ApiKey.objects.for_account(account_a).get().pk
    client.post(f"/admin/accounts/apikey/{key_id}/revoke/", follow=True)
    revoke = only(account_a, "key.revoke")
    assert (revoke.actor_kind, revoke.actor_id) == ("staff", staff.pk)

    page = f"/admin/accounts/account/{account_a.pk}/change/"
    assert client.get(page).status_code == 200
    assert client.get(page).status_code == 200  # a reload within the half hour is not a second entry
    access = only(account_a, "staff.access")
    assert (access.actor_kind, access.actor_id, access.target) == ("staff", staff.pk, staff.email)
    assert client.get("/admin/accounts/account/999999/change/").status_code in (200, 302)  # no entry, no error


def test_a_grant_outside_a_request_is_the_systems(account_a):
    with account_context(account_a):
        credits_grant(account=account_a, amount=10, reason="refund")
    grant = entries(account_a, "credits.grant")[-1]
    assert (grant.actor_kind, grant.target, grant.detail["reason"]) == ("system", "10 credits", "refund")


# --- append-only ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit_auditentry SET action = 'nothing' WHERE id = %s",
        "DELETE FROM audit_auditentry WHERE id = %s",
    ],
)
def test_the_database_refuses_to_change_or_delete_an_entry(account_a, statement):
    with account_context(account_a):
        entry = audit_record(account=account_a, action="key.create", target="x")
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(statement, [entry.pk])
        assert AuditEntry.objects.for_account(account_a).get(pk=entry.pk).action == "key.create"


# --- isolation -----------------------------------------------------------------------------


def test_account_b_never_sees_a(client, account_a, account_b, owner_b):
    with account_context(account_a):
        audit_record(account=account_a, action="document.upload", target="secret-of-a.pdf")
    with account_context(account_b):
        with connection.cursor() as cursor:
            cursor.execute("SELECT DISTINCT account_id FROM audit_auditentry")
            assert cursor.fetchall() == [(account_b.pk,)]  # B's own starting credits, nothing of A's
            cursor.execute("SELECT count(*) FROM audit_auditentry WHERE target = 'secret-of-a.pdf'")
            assert cursor.fetchone()[0] == 0
            # Nor can B's context write an entry that claims to be A's.
            with pytest.raises(DatabaseError), transaction.atomic():
                cursor.execute(
                    "INSERT INTO audit_auditentry (account_id, created_at, action, actor_kind, actor_label,"
                    " target, detail) VALUES (%s, now(), 'x', 'user', '', '', '{}')",
                    [account_a.pk],
                )
    client.force_login(owner_b)
    body = client.get("/api/v1/audit/").json()
    assert all("secret-of-a" not in r["target"] for r in body["results"])
    assert "secret-of-a" not in client.get("/team/").content.decode()


# --- the API and the page --------------------------------------------------------------------


def test_members_and_keys_get_403(client, account_a):
    client.force_login(add_member(account_a, role=Role.MEMBER))
    response = client.get("/api/v1/audit/")
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert client.get("/team/").status_code == 403
    client.logout()
    response = client.get("/api/v1/audit/", **key_header(account_a))
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert client.get("/api/v1/audit/").status_code == 401


def test_admins_page_through_newest_first_and_filter(client, account_a):
    admin_user = add_member(account_a, role=Role.ADMIN)
    with account_context(account_a):
        for i in range(5):
            audit_record(account=account_a, action="document.upload", actor=admin_user, target=f"doc-{i}")
        audit_record(account=account_a, action="key.create", target="k")
    starting = entries(account_a, "credits.grant")[0].target  # the account's starting credits, the oldest entry
    client.force_login(admin_user)
    first = client.get("/api/v1/audit/?page_size=4").json()
    assert set(first["results"][0]) == {"at", "actor", "action", "target", "detail"}
    assert [r["target"] for r in first["results"]] == ["k", "doc-4", "doc-3", "doc-2"]
    assert first["next"]
    second = client.get(first["next"]).json()
    assert [r["target"] for r in second["results"]] == ["doc-1", "doc-0", starting]
    assert second["next"] is None

    uploads = client.get("/api/v1/audit/?action=document.upload").json()["results"]
    assert len(uploads) == 5 and uploads[0]["actor"] == {"kind": "user", "id": admin_user.pk, "name": admin_user.email}
    assert len(client.get("/api/v1/audit/?action=document").json()["results"]) == 5
    assert [r["target"] for r in client.get("/api/v1/audit/?actor=system").json()["results"]] == ["k", starting]
    assert len(client.get(f"/api/v1/audit/?actor={admin_user.email.upper()}").json()["results"]) == 5

    page = client.get("/team/?action=key.create").content.decode()
    assert 'id="audit-table"' in page and "key.create" in page and "doc-4" not in page
    assert "doc-4" in client.get("/team/").content.decode()


def test_admin_lists_entries_read_only_with_the_account_filter(client, account_a, account_b):
    with account_context(account_a):
        audit_record(account=account_a, action="key.create", target="only-a")
    with account_context(account_b):
        audit_record(account=account_b, action="key.create", target="only-b")
    client.force_login(make_user("root@groundwork.test", is_staff=True, is_superuser=True))
    page = client.get(f"/admin/audit/auditentry/?account={account_a.pk}").content.decode()
    assert "only-a" in page and "only-b" not in page
    with account_context(account_a):
        entry = AuditEntry.objects.for_account(account_a).get(target="only-a")
    assert client.post(f"/admin/audit/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.get("/admin/audit/auditentry/add/").status_code == 403
