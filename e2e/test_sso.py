"""Single sign-on in the browser: the login page's "Sign in with SSO" → the provider (a real
OpenID provider on loopback, accounts/tests/oidc_provider.py) → back signed in on the
dashboard; the owner requires SSO on the Team page; a password session then meets the
"requires single sign-on" page, and its SSO button lets the person in."""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from accounts.models import Role
from accounts.tests.factories import add_member, make_account, make_user
from accounts.tests.oidc_provider import Provider
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SSO_ENV = ("OIDC_ISSUER", "OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET")
OWN_STACK = True  # its daphne reads SSO_ENV, set by the provider fixture, at start


@pytest.fixture(scope="module")
def provider():
    """Started, and named in the environment, before the module's stack starts daphne (the
    stack passes this process's environment on)."""
    provider = Provider().start()
    before = {name: os.environ.get(name) for name in SSO_ENV}
    os.environ.update(OIDC_ISSUER=provider.issuer, OIDC_CLIENT_ID="groundwork-e2e", OIDC_CLIENT_SECRET="e2e-secret")
    yield provider
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    provider.stop()


@pytest.fixture(scope="module")
def stack(provider, stack):
    """e2e's stack, started after the provider is in the environment."""
    return stack


def _at_provider(page, sub: str) -> None:
    expect(page.get_by_role("heading", name="Authorize Client")).to_be_visible()
    page.get_by_placeholder("sub").fill(sub)
    page.get_by_role("button", name="Authorize", exact=True).click()


def test_sign_in_with_sso_then_require_it(new_page, stack, provider):
    account = make_account("Acme SSO", owner_email="owner@acme-sso.test")
    add_member(account, make_user("member@acme-sso.test"), role=Role.MEMBER)
    provider.user("owner-at-idp", email="owner@acme-sso.test", email_verified=True, name="Olive Owner")

    page = new_page()
    page.goto("/login/")
    page.get_by_role("link", name="Sign in with SSO").click()
    _at_provider(page, "owner-at-idp")
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    expect(page.get_by_text("Signed in as owner@acme-sso.test through single sign-on.")).to_be_visible()
    assert page.url.rstrip("/") == stack.base_url

    page.goto("/team/")
    page.get_by_role("button", name="Members must sign in with SSO").click()
    expect(page.get_by_text("Members of Acme SSO must now sign in with SSO.")).to_be_visible()

    member = new_page()
    member.goto("/login/")
    member.get_by_label("Email").fill("member@acme-sso.test")
    member.get_by_label("Password").fill("correct-horse-battery-staple")
    member.get_by_role("button", name="Log in").click()
    expect(member.get_by_role("heading", name="Acme SSO requires single sign-on")).to_be_visible()
    provider.user("member-at-idp", email="member@acme-sso.test", email_verified=True)
    member.get_by_role("link", name="Sign in with SSO").click()
    _at_provider(member, "member-at-idp")
    expect(member.get_by_role("navigation", name="Main")).to_be_visible()
    expect(member.get_by_role("heading", name="Acme SSO requires single sign-on")).to_have_count(0)


def test_password_login_still_works_where_sso_is_not_required(new_page, stack):
    make_account("Beta Password", owner_email="owner@beta-password.test")
    page = new_page()
    log_in(page, "owner@beta-password.test")
    expect(page.get_by_role("link", name="Sign in with SSO")).to_have_count(0)
