import pytest
from django.utils import timezone

from accounts import services
from accounts.errors import AccountError
from accounts.models import Account, Invitation, Membership, Role, User
from accounts.selectors import membership_list_for_user
from accounts.tests.factories import PASSWORD, add_member, make_user
from core.tenancy import account_context


def test_signup_creates_user_account_and_owner_membership(db):
    user, account = services.signup(email="Ann@Example.test", password=PASSWORD, account_name="Ann's team")
    assert user.email == "ann@example.test"
    assert account.slug == "anns-team"
    with account_context(account):
        membership = Membership.objects.for_account(account).get()
    assert membership.user == user and membership.role == Role.OWNER


@pytest.mark.parametrize("email", ["ann@example.test", "ANN@example.test"])
def test_duplicate_email_is_a_clear_error(db, email):
    services.signup(email="ann@example.test", password=PASSWORD, account_name="A")
    with pytest.raises(AccountError) as exc:
        services.signup(email=email, password=PASSWORD, account_name="B")
    assert exc.value.code == "duplicate_email"
    assert "already exists" in exc.value.message
    assert User.objects.count() == 1 and Account.objects.count() == 1


def test_weak_password_and_bad_email_are_refused(db):
    with pytest.raises(AccountError, match="too short|too common"):
        services.signup(email="x@example.test", password="123", account_name="A")
    with pytest.raises(AccountError, match="valid email"):
        services.signup(email="not-an-email", password=PASSWORD, account_name="A")
    assert User.objects.count() == 0


def test_duplicate_slug_is_refused_and_generated_slugs_are_unique(db):
    owner = make_user()
    services.account_create(name="Acme", owner=owner, slug="acme")
    with pytest.raises(AccountError) as exc:
        services.account_create(name="Other", owner=owner, slug="acme")
    assert exc.value.code == "duplicate_slug"
    second = services.account_create(name="Acme", owner=owner)
    assert second.slug == "acme-2"


def test_invite_existing_user_waits_for_their_accept(account_a, owner_a):
    """Nobody lands in a team they did not accept."""
    bob = make_user("bob@example.test", email_verified_at=timezone.now())
    with account_context(account_a):
        invitation = services.member_invite(account=account_a, actor=owner_a, email="BOB@example.test", role="admin")
    assert isinstance(invitation, Invitation) and invitation.email == "bob@example.test"
    assert {m.account_id for m in membership_list_for_user(user=bob)} == set()
    membership = services.invitation_accept_by_id(user=bob, invitation_id=invitation.pk)
    assert membership.role == "admin"
    assert {m.account_id for m in membership_list_for_user(user=bob)} == {account_a.pk}


def test_signing_up_with_an_invited_email_joins_nothing(account_a, owner_a):
    with account_context(account_a):
        invitation = services.member_invite(account=account_a, actor=owner_a, email="carol@example.test")
    assert isinstance(invitation, Invitation)
    carol, own_account = services.signup(email="carol@example.test", password=PASSWORD, account_name="Carol")
    assert {m.account_id for m in membership_list_for_user(user=carol)} == {own_account.pk}
    with account_context(account_a):
        assert Invitation.objects.for_account(account_a).count() == 1


def test_inviting_an_existing_member_or_twice_is_refused(account_a, owner_a):
    with account_context(account_a):
        with pytest.raises(AccountError) as exc:
            services.member_invite(account=account_a, actor=owner_a, email=owner_a.email)
        assert exc.value.code == "already_member"
        services.member_invite(account=account_a, actor=owner_a, email="dan@example.test")
        with pytest.raises(AccountError) as exc:
            services.member_invite(account=account_a, actor=owner_a, email="dan@example.test")
        assert exc.value.code == "already_invited"


def test_members_cannot_manage_the_team(account_a):
    member = add_member(account_a)
    with account_context(account_a):
        with pytest.raises(AccountError) as exc:
            services.member_invite(account=account_a, actor=member, email="eve@example.test")
        assert exc.value.status == 403
        with pytest.raises(AccountError):
            services.api_key_create(account=account_a, actor=member, name="k")


def test_admin_cannot_create_owners(account_a):
    admin = add_member(account_a, role=Role.ADMIN)
    with account_context(account_a):
        with pytest.raises(AccountError, match="Only owners"):
            services.member_invite(account=account_a, actor=admin, email="f@example.test", role="owner")


def _membership(account, user):
    return Membership.objects.for_account(account).get(user=user)


def test_last_owner_cannot_leave_or_be_demoted(account_a, owner_a):
    with account_context(account_a):
        mine = _membership(account_a, owner_a)
        with pytest.raises(AccountError) as exc:
            services.member_remove(account=account_a, actor=owner_a, membership_id=mine.pk)
        assert exc.value.code == "last_owner"
        with pytest.raises(AccountError) as exc:
            services.member_change_role(account=account_a, actor=owner_a, membership_id=mine.pk, role="member")
        assert exc.value.code == "last_owner"
        assert _membership(account_a, owner_a).role == Role.OWNER


def test_with_a_second_owner_the_first_may_leave(account_a, owner_a):
    second = add_member(account_a, role=Role.OWNER)
    with account_context(account_a):
        services.member_remove(account=account_a, actor=owner_a, membership_id=_membership(account_a, owner_a).pk)
        assert list(Membership.objects.for_account(account_a).values_list("user", flat=True)) == [second.pk]


def test_change_role_and_remove_member(account_a, owner_a):
    member = add_member(account_a)
    with account_context(account_a):
        m = _membership(account_a, member)
        services.member_change_role(account=account_a, actor=owner_a, membership_id=m.pk, role="admin")
        assert _membership(account_a, member).role == "admin"
        services.member_remove(account=account_a, actor=owner_a, membership_id=m.pk)
        assert not Membership.objects.for_account(account_a).filter(user=member).exists()


def test_other_accounts_membership_ids_are_not_found(account_a, owner_a, account_b, owner_b):
    with account_context(account_b):
        b_membership = _membership(account_b, owner_b)
    with account_context(account_a):
        with pytest.raises(AccountError) as exc:
            services.member_remove(account=account_a, actor=owner_a, membership_id=b_membership.pk)
        assert exc.value.status == 404
        with pytest.raises(AccountError) as exc:
            services.member_change_role(account=account_a, actor=owner_a, membership_id=b_membership.pk, role="member")
        assert exc.value.status == 404


def test_api_key_is_hashed_shown_once_and_revocable(account_a, owner_a):
    with account_context(account_a):
        key, raw = services.api_key_create(account=account_a, actor=owner_a, name="zapier")
        assert raw.startswith("gw_") and len(raw) > 30
        assert raw not in (key.key_hash, key.prefix) and key.prefix == raw[:10]
        assert key.created_by == owner_a
        services.api_key_revoke(account=account_a, actor=owner_a, key_id=key.pk)
        key.refresh_from_db()
        assert key.revoked_at is not None
