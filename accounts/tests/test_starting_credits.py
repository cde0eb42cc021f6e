"""Starting credits are paid once per person. Found from outside: a verified person created team after team
(`POST /accounts/new/`), each with the sign-up grant: unlimited free credits. Starting credits
are one grant per verified person, and a person creates at most TEAMS_PER_PERSON_PER_DAY
teams a day."""

import datetime as dt
import re
import threading

import pytest
from django.core import mail
from django.db import connection
from django.test import Client
from django.utils import timezone

from accounts import services
from accounts.models import Account, User
from accounts.tests.factories import PASSWORD, make_user
from billing.models import CreditLedgerEntry
from billing.selectors import balance_get
from core.tenancy import account_context, dangerously_bypass_tenancy

VERIFY = re.compile(r"http://testserver(/verify-email/[^\s/]+/)")


def _balance(account):
    with account_context(account):
        return balance_get(account=account)


def _signed_up_and_verified(email="ann@example.test", name="Ann Co"):
    mail.outbox.clear()
    client = Client(REMOTE_ADDR="203.0.113.7")
    client.post("/signup/", {"email": email, "password": PASSWORD, "account_name": name})
    [message] = [m for m in mail.outbox if m.to == [email]]
    client.get(VERIFY.search(message.body).group(1))
    return client, Account.objects.get(name=name)


@pytest.mark.django_db(transaction=True)
def test_a_verified_person_gets_one_grant_however_many_teams_they_make(settings):
    client, first = _signed_up_and_verified()
    assert _balance(first) == settings.SIGNUP_CREDITS
    for name in ("Second", "Third"):
        response = client.post("/accounts/new/", {"name": name}, follow=True)
        assert response.status_code == 200
        assert _balance(Account.objects.get(name=name)) == 0
    page = response.content.decode()
    assert "starts without credits" in page and "Ann Co" in page
    grants = 0
    with dangerously_bypass_tenancy(reason="test: every signup grant"):
        grants = CreditLedgerEntry.all_accounts.filter(kind="signup").count()
    assert grants == 1


@pytest.mark.django_db(transaction=True)
def test_a_verified_person_who_never_had_a_grant_gets_it_with_their_first_team(settings):
    """Someone who joined by invitation (no team of their own yet) gets the grant once, on the
    first team they create."""
    person = make_user("invited@example.test", email_verified_at=timezone.now())
    first = services.team_create(name="Mine", owner=person)
    second = services.team_create(name="Mine too", owner=person)
    assert (_balance(first), _balance(second)) == (settings.SIGNUP_CREDITS, 0)


@pytest.mark.django_db(transaction=True)
def test_verifying_after_making_teams_still_pays_once(settings):
    mail.outbox.clear()
    client = Client(REMOTE_ADDR="203.0.113.8")
    client.post("/signup/", {"email": "bo@example.test", "password": PASSWORD, "account_name": "Bo Co"})
    client.post("/accounts/new/", {"name": "Bo Two"})  # unverified: starts empty
    client.get(VERIFY.search(mail.outbox[-1].body).group(1))
    client.post("/accounts/new/", {"name": "Bo Three"})  # verified, but the grant went to Bo Co
    assert [_balance(Account.objects.get(name=n)) for n in ("Bo Co", "Bo Two", "Bo Three")] == [
        settings.SIGNUP_CREDITS,
        0,
        0,
    ]


@pytest.mark.django_db(transaction=True)
def test_teams_a_person_creates_are_capped_per_day(settings):
    settings.TEAMS_PER_PERSON_PER_DAY = 3
    client, _first = _signed_up_and_verified()  # the sign-up team counts: one made today
    client.post("/accounts/new/", {"name": "Two"})
    client.post("/accounts/new/", {"name": "Three"})
    response = client.post("/accounts/new/", {"name": "Four"}, follow=True)
    assert not Account.objects.filter(name="Four").exists()
    assert "at most 3 teams a day" in response.content.decode()
    person = User.objects.get(email="ann@example.test")
    with pytest.raises(services.AccountError) as refused:
        services.team_create(name="Four", owner=person)
    assert (refused.value.code, refused.value.status) == ("too_many_teams", 429)
    # A day later the person may create again.
    Account.objects.filter(created_by=person).update(created_at=timezone.now() - dt.timedelta(days=1, minutes=1))
    services.team_create(name="Four", owner=person)


@pytest.mark.django_db(transaction=True)
def test_two_teams_created_at_once_share_one_grant(settings):
    person = make_user("race@example.test", email_verified_at=timezone.now())
    made, barrier = [], threading.Barrier(2)

    def create(name):
        try:
            barrier.wait()
            made.append(services.team_create(name=name, owner=person))
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(n,)) for n in ("Left", "Right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(_balance(a) for a in made) == [0, settings.SIGNUP_CREDITS]
