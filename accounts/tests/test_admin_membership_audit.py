"""Support staff's membership edits in the admin (the membership pages and the account
page's members inline) are in the account's audit log with the staff actor, as the Team
page's are with the member: member.add, member.role_change, member.remove."""

import pytest

from accounts.models import Membership, Role
from accounts.tests.factories import add_member, make_user
from audit.models import ActorKind, AuditEntry
from core.tenancy import account_context


@pytest.fixture
def staff(client, db):
    user = make_user("support@groundwork.test", is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


def _entries(account, action):
    with account_context(account):
        return list(AuditEntry.objects.for_account(account).filter(action=action).order_by("pk"))


def _membership(account, user):
    with account_context(account):
        return Membership.objects.for_account(account).get(user=user)


def _by_staff(entry, staff):
    return entry.actor_kind == ActorKind.STAFF and entry.actor_id == staff.pk and entry.actor_label == staff.email


def test_membership_page_add_change_and_delete_are_audited(client, staff, account_a):
    person = make_user("person@acme.test")
    response = client.post(
        "/admin/accounts/membership/add/", {"user": person.pk, "account": account_a.pk, "role": Role.MEMBER}
    )
    assert response.status_code == 302, response.content
    (added,) = _entries(account_a, "member.add")
    assert _by_staff(added, staff) and added.target == person.email and added.detail == {"role": "member"}

    membership = _membership(account_a, person)
    response = client.post(
        f"/admin/accounts/membership/{membership.pk}/change/",
        {"user": person.pk, "account": account_a.pk, "role": Role.ADMIN},
    )
    assert response.status_code == 302, response.content
    (changed,) = _entries(account_a, "member.role_change")
    assert _by_staff(changed, staff) and changed.detail == {"from": "member", "to": "admin"}

    # Saving without a change records nothing.
    client.post(
        f"/admin/accounts/membership/{membership.pk}/change/",
        {"user": person.pk, "account": account_a.pk, "role": Role.ADMIN},
    )
    assert len(_entries(account_a, "member.role_change")) == 1

    assert client.post(f"/admin/accounts/membership/{membership.pk}/delete/", {"post": "yes"}).status_code == 302
    (removed,) = _entries(account_a, "member.remove")
    assert _by_staff(removed, staff) and removed.target == person.email and removed.detail == {"role": "admin"}


def test_bulk_delete_is_audited_per_member(client, staff, account_a, account_b):
    a, b = add_member(account_a), add_member(account_b)
    ids = [_membership(account_a, a).pk, _membership(account_b, b).pk]
    response = client.post(
        "/admin/accounts/membership/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"}
    )
    assert response.status_code == 302
    assert [e.target for e in _entries(account_a, "member.remove")] == [a.email]
    assert [e.target for e in _entries(account_b, "member.remove")] == [b.email]
    assert all(_by_staff(e, staff) for e in _entries(account_a, "member.remove") + _entries(account_b, "member.remove"))


def _change_page_data(client, account) -> dict:
    """The account page's form as the browser would post it back unchanged."""
    response = client.get(f"/admin/accounts/account/{account.pk}/change/")
    form = response.context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        for name in formset.management_form.fields:
            data[f"{formset.prefix}-{name}"] = formset.management_form[name].value()
        for sub in formset.initial_forms:
            for name in sub.fields:
                value = sub[name].value()
                if value is not None and value is not False:
                    data[sub.add_prefix(name)] = value
    return data


def _inline_prefix(data, membership) -> str:
    return next(
        k[: -len("-id")]
        for k, v in data.items()
        if k.endswith("-id") and str(v) == str(membership.pk) and k.startswith("membership")
    )


def test_account_page_inline_edits_are_audited(client, staff, account_a, owner_a):
    member, leaver = (
        add_member(account_a, make_user("member@acme.test")),
        add_member(account_a, make_user("leaver@acme.test")),
    )
    data = _change_page_data(client, account_a)
    data[_inline_prefix(data, _membership(account_a, member)) + "-role"] = Role.VIEWER
    data[_inline_prefix(data, _membership(account_a, leaver)) + "-DELETE"] = "on"
    response = client.post(f"/admin/accounts/account/{account_a.pk}/change/", data)
    assert response.status_code == 302, response.context and [
        f.errors for f in response.context.get("inline_admin_formsets", [])
    ]
    (changed,) = _entries(account_a, "member.role_change")
    assert (
        _by_staff(changed, staff)
        and changed.target == member.email
        and changed.detail == {"from": "member", "to": "viewer"}
    )
    (removed,) = _entries(account_a, "member.remove")
    assert _by_staff(removed, staff) and removed.target == leaver.email
    assert not _entries(account_a, "member.add")


def test_team_page_role_changes_stay_the_members(client, account_a, owner_a):
    member = add_member(account_a)
    client.force_login(owner_a)
    client.post(f"/team/members/{_membership(account_a, member).pk}/role/", {"role": Role.VIEWER})
    (changed,) = _entries(account_a, "member.role_change")
    assert changed.actor_kind == ActorKind.USER and changed.actor_id == owner_a.pk


# --- through accounts.services: the last owner stays, one entry per change --------------------


def _messages(response) -> str:
    return " ".join(str(m) for m in response.context["messages"])


def _roles(account) -> dict[str, str]:
    with account_context(account):
        return dict(Membership.objects.for_account(account).values_list("user__email", "role"))


def test_the_membership_page_cannot_demote_or_remove_the_last_owner(client, staff, account_a, owner_a):
    membership = _membership(account_a, owner_a)
    response = client.post(
        f"/admin/accounts/membership/{membership.pk}/change/",
        {"user": owner_a.pk, "account": account_a.pk, "role": Role.MEMBER},
        follow=True,
    )
    assert "The last owner cannot be demoted" in _messages(response)
    response = client.post(f"/admin/accounts/membership/{membership.pk}/delete/", {"post": "yes"}, follow=True)
    assert "The last owner cannot be removed" in _messages(response)
    response = client.post(
        "/admin/accounts/membership/",
        {"action": "delete_selected", "_selected_action": [membership.pk], "post": "yes"},
        follow=True,
    )
    assert "The last owner cannot be removed" in _messages(response)
    assert _roles(account_a) == {owner_a.email: Role.OWNER}
    assert not _entries(account_a, "member.role_change") and not _entries(account_a, "member.remove")


def test_a_refused_bulk_delete_removes_nobody(client, staff, account_a, owner_a):
    member = add_member(account_a)
    ids = [_membership(account_a, member).pk, _membership(account_a, owner_a).pk]
    response = client.post(
        "/admin/accounts/membership/",
        {"action": "delete_selected", "_selected_action": ids, "post": "yes"},
        follow=True,
    )
    assert "The last owner cannot be removed" in _messages(response)
    assert set(_roles(account_a)) == {owner_a.email, member.email}
    assert not _entries(account_a, "member.remove")


def test_the_account_page_cannot_demote_or_remove_the_last_owner(client, staff, account_a, owner_a):
    for field, value, words in (("-role", Role.ADMIN, "cannot be demoted"), ("-DELETE", "on", "cannot be removed")):
        data = _change_page_data(client, account_a)
        data[_inline_prefix(data, _membership(account_a, owner_a)) + field] = value
        data["name"] = "Renamed with the refused change"
        response = client.post(f"/admin/accounts/account/{account_a.pk}/change/", data, follow=True)
        assert f"The last owner {words}" in _messages(response)
    account_a.refresh_from_db()
    assert account_a.name != "Renamed with the refused change"  # the whole save was undone
    assert _roles(account_a) == {owner_a.email: Role.OWNER}
    assert not _entries(account_a, "member.role_change") and not _entries(account_a, "member.remove")


def test_the_account_page_hands_ownership_over_in_one_save(client, staff, account_a, owner_a):
    heir = add_member(account_a, make_user("heir@acme.test"))
    data = _change_page_data(client, account_a)
    data[_inline_prefix(data, _membership(account_a, owner_a)) + "-role"] = Role.ADMIN
    data[_inline_prefix(data, _membership(account_a, heir)) + "-role"] = Role.OWNER
    response = client.post(f"/admin/accounts/account/{account_a.pk}/change/", data)
    assert response.status_code == 302
    assert _roles(account_a) == {owner_a.email: Role.ADMIN, heir.email: Role.OWNER}
    changes = _entries(account_a, "member.role_change")
    assert sorted((e.target, e.detail["to"]) for e in changes) == [(heir.email, "owner"), (owner_a.email, "admin")]
    assert all(_by_staff(e, staff) for e in changes)


def test_the_admin_adds_once_and_refuses_a_second_membership(client, staff, account_a):
    person = make_user("twice@acme.test")
    for _ in range(2):
        client.post(
            "/admin/accounts/membership/add/", {"user": person.pk, "account": account_a.pk, "role": Role.VIEWER}
        )
    assert _roles(account_a)[person.email] == Role.VIEWER
    (added,) = _entries(account_a, "member.add")
    assert _by_staff(added, staff)
