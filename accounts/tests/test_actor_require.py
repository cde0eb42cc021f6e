"""accounts.permissions.actor_require: a service's actor, as the principal the table checks
(a person: their membership in this account; an API key: itself), allowed or refused."""

import pytest

from accounts.models import ApiKey, Membership, Role
from accounts.permissions import Action, Forbidden, actor_require
from accounts.tests.factories import add_member, make_api_key, make_user
from core.tenancy import account_context


def test_a_person_acts_as_their_membership_of_this_account(account_a):
    admin = add_member(account_a, role=Role.ADMIN)
    with account_context(account_a):
        principal = actor_require(account=account_a, actor=admin, action=Action.BUDGETS_MANAGE)
    assert isinstance(principal, Membership) and principal.user_id == admin.pk and principal.account_id == account_a.pk


def test_a_member_without_the_right_gets_the_tables_refusal(account_a):
    member = add_member(account_a, role=Role.MEMBER)
    with account_context(account_a), pytest.raises(Forbidden) as refused:
        actor_require(
            account=account_a,
            actor=member,
            action=Action.BUDGETS_MANAGE,
            outsider="Only owners and admins can set budgets.",
        )
    assert refused.value.status == 403 and refused.value.code == "forbidden"
    assert refused.value.message == "As a member, you may not set credit budgets. Ask an owner or admin of the account."


def test_a_person_outside_the_account_gets_the_outsider_message_or_the_tables(account_a, account_b):
    other_owner = account_b.test_owner  # an owner, but of another account
    with account_context(account_a):
        with pytest.raises(Forbidden) as outsider:
            actor_require(
                account=account_a,
                actor=other_owner,
                action=Action.MEMBERS_MANAGE,
                outsider="Only owners and admins can manage the team.",
            )
        with pytest.raises(Forbidden) as nobody:
            actor_require(account=account_a, actor=make_user(), action=Action.BILLING_MANAGE)
        with pytest.raises(Forbidden):
            actor_require(account=account_a, actor=None, action=Action.BILLING_MANAGE)
    assert outsider.value.message == "Only owners and admins can manage the team."
    assert nobody.value.message == "You may not manage billing. Ask an owner or admin of the account."


def test_an_api_key_is_checked_as_itself_never_as_a_person(account_a):
    make_api_key(account_a)
    with account_context(account_a):
        key = ApiKey.objects.for_account(account_a).get()
        with pytest.raises(Forbidden) as refused:
            actor_require(account=account_a, actor=key, action=Action.BUDGETS_MANAGE, outsider="not used for a key")
        key.scope = "write"
        assert actor_require(account=account_a, actor=key, action=Action.DOCUMENT_UPLOAD) is key
    assert "not used" not in refused.value.message
