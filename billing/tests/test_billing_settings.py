"""Owners' billing (billing.manage): the billing contact and the low-balance alert on the
Credits page and over REST, who may, the alert firing once per crossing and re-arming,
account isolation and clear refusals of bad input."""

import pytest
from django.core import mail
from django.test import Client

from accounts.models import Role
from accounts.services import api_key_create
from accounts.tests.factories import add_member, make_user
from audit.models import AuditEntry
from billing.alerts import billing_settings_update
from billing.models import BillingSettings
from billing.selectors import balance_get
from billing.services import credits_debit, credits_grant, credits_hold, hold_settle
from core.tenancy import account_context

API = "/api/v1/billing/"


def _client(user):
    client = Client()
    client.force_login(user)
    return client


def _key(account, scope):
    with account_context(account):
        _, raw = api_key_create(account=account, actor=None, name=f"{scope} key", scope=scope)
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def _put(client, body, **extra):
    return client.put(API, body, content_type="application/json", **extra)


def _settings(account, **fields):
    with account_context(account):
        return billing_settings_update(account=account, actor=account.test_owner, **fields)


def _spend(account, tokens, key):
    with account_context(account):
        credits_debit(account=account, tokens=tokens, key=key, kind="chat")


@pytest.fixture
def funded(account_a):
    with account_context(account_a):
        credits_grant(account=account_a, amount=10_000, reason="test credits", key="funded")
    return account_a


def _balance(account):
    with account_context(account):
        return balance_get(account=account)


def _alerts(account):
    with account_context(account):
        return list(AuditEntry.objects.for_account(account).filter(action="billing.alert").order_by("pk"))


# --- who may ----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", [Role.ADMIN, Role.MEMBER, Role.VIEWER])
def test_only_owners_see_and_change_billing_on_the_page_and_the_api(account_a, role):
    other = add_member(account_a, make_user(f"{role}@a.test"), role=role)
    owner, them = _client(account_a.test_owner), _client(other)
    # The page: the section for owners only; the form refused to anyone else.
    assert 'id="billing-form"' in owner.get("/credits/").content.decode()
    page = them.get("/credits/")
    assert page.status_code == 200 and 'id="billing-form"' not in page.content.decode()
    refused = them.post("/credits/billing/", {"contact_email": "x@a.test", "low_balance_threshold": "5"})
    assert refused.status_code == 403
    saved = owner.post("/credits/billing/", {"contact_email": "pay@a.test", "low_balance_threshold": "5,000"})
    assert saved.status_code == 302
    # REST: 403 forbidden for GET and PUT.
    for response in (them.get(API), _put(them, {"contact_email": "x@a.test"})):
        assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    body = owner.get(API).json()
    assert (body["contact_email"], body["low_balance_threshold"], body["alert"]["state"]) == (
        "pay@a.test",
        5000,
        "armed",
    )
    with account_context(account_a):
        assert BillingSettings.objects.for_account(account_a).get().contact_email == "pay@a.test"


@pytest.mark.parametrize("scope", ["read", "write"])
def test_api_keys_never_manage_billing(client, account_a, scope):
    auth = _key(account_a, scope)
    for response in (client.get(API, **auth), _put(client, {"contact_email": "x@a.test"}, **auth)):
        assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"


def test_owner_sets_billing_over_rest_with_an_audit_entry(client_a, account_a):
    response = _put(client_a, {"contact_email": "pay@acme.test", "low_balance_threshold": 20_000})
    assert response.status_code == 200, response.content
    assert response.json()["alert"] == {
        "state": "armed",
        "last_sent_at": None,
        "last_sent_to": None,
        "last_sent_balance": None,
    }
    # Only what is given changes.
    assert _put(client_a, {"low_balance_threshold": None}).json()["contact_email"] == "pay@acme.test"
    with account_context(account_a):
        [first, second] = AuditEntry.objects.for_account(account_a).filter(action="billing.update").order_by("pk")
    assert first.detail["low_balance_threshold"] == 20_000 and first.actor_label == "owner@acme.test"
    assert second.detail["previous"]["low_balance_threshold"] == 20_000


# --- the alert ---------------------------------------------------------------------------------


def test_the_alert_fires_once_on_crossing_and_rearms_after_a_grant(
    funded, account_a, django_capture_on_commit_callbacks
):
    balance = _balance(account_a)
    _settings(account_a, contact_email="pay@acme.test", low_balance_threshold=balance - 100)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        _spend(account_a, 50, "above")  # still above: nothing
    assert mail.outbox == []
    with django_capture_on_commit_callbacks(execute=True):
        _spend(account_a, 100, "cross")  # below now: one email
        _spend(account_a, 10, "again")  # still below: no second one
    [message] = mail.outbox
    assert message.to == ["pay@acme.test"] and f"{balance - 150:,} credits" in message.subject
    assert f"below the low-balance alert of {balance - 100:,}" in message.body
    with account_context(account_a):
        current = BillingSettings.objects.for_account(account_a).get()
    assert (current.alert_armed, current.last_alert_balance, current.last_alert_to) == (
        False,
        balance - 150,
        "pay@acme.test",
    )
    assert len(_alerts(account_a)) == 1
    # A grant that does not reach the threshold keeps it quiet; one that does arms it again.
    with django_capture_on_commit_callbacks(execute=True), account_context(account_a):
        credits_grant(account=account_a, amount=20, reason="top-up", key="small")
        credits_debit(account=account_a, tokens=1, key="still-below", kind="chat")
    assert len(mail.outbox) == 1
    with account_context(account_a):
        credits_grant(account=account_a, amount=1000, reason="top-up", key="big")
        assert BillingSettings.objects.for_account(account_a).get().alert_armed
    # A hold settled below it is a charge too: the second crossing sends the second email.
    with django_capture_on_commit_callbacks(execute=True), account_context(account_a):
        hold = credits_hold(account=account_a, amount=2000, key="turn")
        hold_settle(hold=hold, used_tokens=1500)
    assert len(mail.outbox) == 2 and len(_alerts(account_a)) == 2


def test_a_rolled_back_charge_sends_no_alert(funded, account_a, django_capture_on_commit_callbacks):
    from django.db import transaction

    _settings(account_a, contact_email="pay@acme.test", low_balance_threshold=_balance(account_a))
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True), account_context(account_a):
        try:
            with transaction.atomic():
                credits_debit(account=account_a, tokens=5, key="undone", kind="chat")
                raise RuntimeError("the turn failed")
        except RuntimeError:
            pass
    assert mail.outbox == [] and _alerts(account_a) == []
    with account_context(account_a):
        assert BillingSettings.objects.for_account(account_a).get().alert_armed


def test_the_page_shows_the_state_and_the_last_alert(funded, client_a, account_a, django_capture_on_commit_callbacks):
    _settings(account_a, contact_email="pay@acme.test", low_balance_threshold=_balance(account_a))
    page = client_a.get("/credits/").content.decode()
    assert "Alert armed: pay@acme.test gets an email" in page and 'id="billing-last-alert"' not in page
    with django_capture_on_commit_callbacks(execute=True):
        _spend(account_a, 5, "cross")
    page = client_a.get("/credits/").content.decode()
    assert "Alert sent: the balance is below" in page and "Last alert:" in page and "to pay@acme.test" in page


# --- isolation -----------------------------------------------------------------------------------


def test_account_b_never_reads_or_changes_account_as_billing(account_a, account_b, client):
    _settings(account_a, contact_email="secret@acme.test", low_balance_threshold=1000)
    owner_b = _client(account_b.test_owner)
    body = owner_b.get(API).json()
    assert body["contact_email"] == "" and body["low_balance_threshold"] is None
    assert "secret@acme.test" not in owner_b.get("/credits/").content.decode()
    assert _put(owner_b, {"contact_email": "b@beta.test"}).status_code == 200
    with account_context(account_a):
        assert BillingSettings.objects.for_account(account_a).get().contact_email == "secret@acme.test"
    # Row-level security: in B's context, A's row is not there even without the app's filter.
    with account_context(account_b):
        assert list(BillingSettings.all_accounts.values_list("contact_email", flat=True)) == ["b@beta.test"]
    # B's charges never fire A's alert.
    with account_context(account_b):
        credits_debit(account=account_b, tokens=5, key="b-spend", kind="chat")
    assert _alerts(account_a) == []


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,code,field",
    [
        ({"contact_email": "not an email"}, "invalid_email", "contact_email"),
        ({"contact_email": "pay@acme.test", "low_balance_threshold": -5}, "invalid_threshold", "low_balance_threshold"),
        (
            {"contact_email": "pay@acme.test", "low_balance_threshold": "lots"},
            "invalid_threshold",
            "low_balance_threshold",
        ),
        (
            {"contact_email": "pay@acme.test", "low_balance_threshold": 10**13},
            "invalid_threshold",
            "low_balance_threshold",
        ),
        (
            {"contact_email": "pay@acme.test", "low_balance_threshold": [1]},
            "invalid_threshold",
            "low_balance_threshold",
        ),
        ({"contact_email": "", "low_balance_threshold": 100}, "contact_required", "contact_email"),
    ],
)
def test_bad_input_over_rest_is_a_clear_400_and_changes_nothing(client_a, account_a, body, code, field):
    response = _put(client_a, body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    with account_context(account_a):
        assert not BillingSettings.objects.for_account(account_a).exclude(contact_email="").exists()
    assert "negative" in error["message"] if body.get("low_balance_threshold") == -5 else True


def test_bad_input_on_the_page_is_the_form_again_saying_why(client_a, account_a):
    response = client_a.post("/credits/billing/", {"contact_email": "nope", "low_balance_threshold": "-1"})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="billing-error"' in page and "is not an email address" in page
    assert 'value="nope"' in page  # what was typed stays in the form
    response = client_a.post("/credits/billing/", {"contact_email": "pay@acme.test", "low_balance_threshold": "-1"})
    assert response.status_code == 400 and "cannot be negative" in response.content.decode()
    with account_context(account_a):
        assert not BillingSettings.objects.for_account(account_a).exclude(contact_email="").exists()
