"""Invitations carry no more rights than their inviter still has, and their emails are
throttled and safe. Found from outside:

4. A removed or demoted admin got back in: the invitations they had issued, with the role
   they gave, survived them; accepting one later restored admin. Removing or demoting a
   member cancels their pending invitations above their new rights, and accepting re-checks
   the inviter's rights.
5. Invitation emails were not throttled (five to one address in a minute by inviting and
   cancelling), and a team name with a newline broke the subject so attacker text became the
   body's first line. Invitations are limited per inviter and per address; names with control
   characters are refused at input.
"""

import pytest
from django.core import mail

from accounts import services
from accounts.errors import AccountError
from accounts.models import Invitation, Membership, Role
from accounts.tests.factories import add_member, make_account, make_user
from core.tenancy import account_context
from documents.errors import CollectionError

pytestmark = pytest.mark.django_db(transaction=True)


def _invite(account, actor, email, role=Role.ADMIN):
    with account_context(account, user=actor):
        return services.member_invite(account=account, actor=actor, email=email, role=role)


def _membership(account, user):
    with account_context(account):
        return Membership.objects.for_account(account).get(user=user)


def _pending(account, email):
    with account_context(account):
        return Invitation.objects.for_account(account).filter(email=email, accepted_at__isnull=True).first()


def _accept(invitation, email):
    person = make_user(email)
    person.email_verified_at = person.date_joined
    person.save(update_fields=["email_verified_at"])
    return services.invitation_accept(invitation=invitation, user=person, via_link=True)


def test_removing_an_admin_cancels_the_invitations_they_issued():
    account = make_account("Acme")
    owner = account.test_owner
    admin = add_member(account, make_user("admin@acme.test"), role=Role.ADMIN)
    invitation = _invite(account, admin, "sidekick@evil.test")
    with account_context(account, user=owner):
        services.member_remove(account=account, actor=owner, membership_id=_membership(account, admin).pk)
    assert _pending(account, "sidekick@evil.test") is None
    with pytest.raises(AccountError) as refused:
        _accept(invitation, "sidekick@evil.test")
    assert refused.value.status in (404, 410)
    with account_context(account):
        assert not Membership.objects.for_account(account).filter(user__email="sidekick@evil.test").exists()


def test_demoting_an_admin_cancels_their_invitations_above_their_new_rights():
    account = make_account("Acme")
    owner = account.test_owner
    admin = add_member(account, make_user("admin@acme.test"), role=Role.ADMIN)
    _invite(account, admin, "second-admin@evil.test", role=Role.ADMIN)
    _invite(account, admin, "a-member@acme.test", role=Role.MEMBER)
    with account_context(account, user=owner):
        services.member_change_role(
            account=account, actor=owner, membership_id=_membership(account, admin).pk, role=Role.MEMBER
        )
    # A member may invite nobody: both are gone.
    assert _pending(account, "second-admin@evil.test") is None and _pending(account, "a-member@acme.test") is None


def test_accepting_rechecks_the_inviters_rights_now():
    """An invitation whose inviter lost the right to give its role since (changed without the
    cancel, e.g. by an older release) is refused at acceptance."""
    account = make_account("Acme")
    admin = add_member(account, make_user("admin@acme.test"), role=Role.ADMIN)
    invitation = _invite(account, admin, "late@acme.test", role=Role.ADMIN)
    with account_context(account):
        Membership.objects.for_account(account).filter(user=admin).update(role=Role.VIEWER)
    with pytest.raises(AccountError) as refused:
        _accept(invitation, "late@acme.test")
    assert refused.value.code == "invitation_invalid" and "no longer" in refused.value.message


def test_an_owner_demoted_to_admin_keeps_the_invitations_an_admin_may_give():
    account = make_account("Acme")
    owner = account.test_owner
    second = add_member(account, make_user("second@acme.test"), role=Role.OWNER)
    _invite(account, second, "new-owner@acme.test", role=Role.OWNER)
    _invite(account, second, "new-admin@acme.test", role=Role.ADMIN)
    with account_context(account, user=owner):
        services.member_change_role(
            account=account, actor=owner, membership_id=_membership(account, second).pk, role=Role.ADMIN
        )
    assert _pending(account, "new-owner@acme.test") is None
    assert _accept(_pending(account, "new-admin@acme.test"), "new-admin@acme.test").role == Role.ADMIN


def test_invitations_are_limited_per_address_and_per_inviter(settings):
    settings.INVITATIONS_PER_ADDRESS = "3/h"
    settings.INVITATIONS_PER_INVITER = "5/h"
    account = make_account("Acme")
    owner = account.test_owner
    mail.outbox.clear()
    for _ in range(3):  # invite and cancel, again and again: the review's five in a minute
        invitation = _invite(account, owner, "victim@example.test")
        with account_context(account, user=owner):
            services.invitation_cancel(account=account, actor=owner, invitation_id=invitation.pk)
    with pytest.raises(AccountError) as refused:
        _invite(account, owner, "victim@example.test")
    assert (refused.value.code, refused.value.status) == ("rate_limited", 429)
    assert len([m for m in mail.outbox if m.to == ["victim@example.test"]]) == 3
    _invite(account, owner, "one@example.test")
    _invite(account, owner, "two@example.test")
    with pytest.raises(AccountError) as refused:
        _invite(account, owner, "three@example.test")
    assert refused.value.code == "rate_limited" and "try again in" in refused.value.message.lower()


@pytest.mark.parametrize(
    "name",
    [
        "Acme\nClick https://evil.test to claim your prize",
        "Acme\r\nBcc: x@evil.test",
        "Acme\x07",
        "Acme\u202eevil",
        "Tab\there",
    ],
)
def test_names_with_control_characters_are_refused_at_input(name):
    owner = make_user()
    with pytest.raises(AccountError) as refused:
        services.account_create(name=name, owner=owner)
    assert refused.value.code == "invalid_name" and refused.value.field == "name"
    with pytest.raises(AccountError):
        services.user_create(email="new@example.test", password="a-long-enough-password-1", full_name=name)
    account = make_account("Fine")
    with account_context(account, user=account.test_owner):
        with pytest.raises(AccountError):
            services.api_key_create(account=account, actor=account.test_owner, name=name)
        from documents.services import collection_create

        with pytest.raises(CollectionError):
            collection_create(account=account, actor=account.test_owner, name=name)


def test_the_invitation_email_subject_is_one_line():
    account = make_account("Acme")
    mail.outbox.clear()
    _invite(account, account.test_owner, "someone@example.test")
    [message] = mail.outbox
    assert "\n" not in message.subject and message.subject.startswith(account.test_owner.get_full_name())


def test_names_typed_before_the_rule_are_cleaned_once():
    import importlib

    from django.apps import apps

    from accounts.models import Account, User

    migration = importlib.import_module("accounts.migrations.0008_names_without_control_characters")
    account = make_account("Fine")
    Account.objects.filter(pk=account.pk).update(name="Acme\nClick here\u202e")
    User.objects.filter(pk=account.test_owner.pk).update(full_name="Ann\r\nBcc: x")
    migration._clean(apps, None)
    account.refresh_from_db()
    account.test_owner.refresh_from_db()
    assert (account.name, account.test_owner.full_name) == ("Acme Click here", "Ann Bcc: x")
