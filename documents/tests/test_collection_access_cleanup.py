"""A removed member's and a revoked key's access to restricted collections is deleted in the
same transaction as the removal or revocation (Team page, services and the admin): nothing
is left to come back if the person is invited again. Other principals keep theirs."""

import pytest
from django.db import transaction

from accounts import services
from accounts.keys import hash_key
from accounts.models import ApiKey, Membership
from accounts.tests.factories import add_member, make_api_key, make_user
from core.tenancy import account_context
from documents.models import CollectionAccess
from documents.services import collection_create


class Rollback(Exception):
    pass


@pytest.fixture
def board(account_a, owner_a):
    member, other = add_member(account_a, make_user("member@acme.test")), add_member(account_a)
    raw, other_raw = make_api_key(account_a, "sync"), make_api_key(account_a, "other")
    with account_context(account_a, user=owner_a):
        keys = {k.key_hash: k for k in ApiKey.objects.for_account(account_a)}
        key, other_key = keys[hash_key(raw)], keys[hash_key(other_raw)]
        collection = collection_create(
            account=account_a,
            actor=owner_a,
            name="Board",
            restricted=True,
            user_ids=[member.pk, other.pk],
            api_key_ids=[key.pk, other_key.pk],
        )
    return dict(
        account=account_a,
        owner=owner_a,
        member=member,
        other=other,
        key=key,
        other_key=other_key,
        collection=collection,
    )


def _grants(account) -> set:
    with account_context(account):
        return {(row.user_id, row.api_key_id) for row in CollectionAccess.objects.for_account(account)}


def _membership(account, user):
    with account_context(account):
        return Membership.objects.for_account(account).get(user=user)


def test_removing_a_member_deletes_their_grants(board):
    account = board["account"]
    with account_context(account):
        services.member_remove(
            account=account, actor=board["owner"], membership_id=_membership(account, board["member"]).pk
        )
    assert _grants(account) == {(board["other"].pk, None), (None, board["key"].pk), (None, board["other_key"].pk)}


def test_revoking_a_key_deletes_its_grants(board):
    account = board["account"]
    with account_context(account):
        services.api_key_revoke(account=account, actor=board["owner"], key_id=board["key"].pk)
    assert _grants(account) == {(board["member"].pk, None), (board["other"].pk, None), (None, board["other_key"].pk)}


def test_the_grants_go_in_the_same_transaction(board):
    """A removal or revocation that rolls back keeps the grants: one transaction, not a job."""
    account, before = board["account"], _grants(board["account"])
    with pytest.raises(Rollback), transaction.atomic(), account_context(account):
        services.member_remove(
            account=account, actor=board["owner"], membership_id=_membership(account, board["member"]).pk
        )
        services.api_key_revoke(account=account, actor=board["owner"], key_id=board["key"].pk)
        assert len(_grants(account)) == 2  # gone inside the transaction
        raise Rollback
    assert _grants(account) == before


def test_admin_removal_deletes_the_grants(client, board):
    account = board["account"]
    client.force_login(make_user("support@groundwork.test", is_staff=True, is_superuser=True))
    membership = _membership(account, board["member"])
    response = client.post(f"/admin/accounts/membership/{membership.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert (board["member"].pk, None) not in _grants(account) and (board["other"].pk, None) in _grants(account)


def test_another_accounts_grants_are_untouched(board, account_b, owner_b):
    other_member = add_member(account_b, board["member"])  # the same person, in account B too
    with account_context(account_b, user=owner_b):
        collection_create(
            account=account_b, actor=owner_b, name="Beta board", restricted=True, user_ids=[other_member.pk]
        )
    with account_context(board["account"]):
        services.member_remove(
            account=board["account"],
            actor=board["owner"],
            membership_id=_membership(board["account"], board["member"]).pk,
        )
    assert _grants(account_b) == {(board["member"].pk, None)}
