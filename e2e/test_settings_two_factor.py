"""Your settings and two-factor sign-in, in a browser: set up TOTP from the secret the page
shows, sign out, sign in with the password and a code, rename the team and see the new name
in the header. Real daphne, worker and database (e2e/conftest.py)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from accounts.tests.factories import PASSWORD, make_account
from accounts.tests.test_two_factor import code_for
from e2e.pages import log_in

CODE = re.compile(r"^Code:?$")
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_two_factor_set_up_sign_in_and_team_rename(new_page, screenshot, stack):
    make_account("Settings Team", owner_email="owner@settings.test")
    page = new_page()
    refused = []
    page.on("console", lambda msg: refused.append(msg.text) if "Content Security Policy" in msg.text else None)
    log_in(page, "owner@settings.test")

    page.get_by_role("link", name="Settings").click()
    expect(page.get_by_role("heading", name="Your settings", level=1)).to_be_visible()
    page.get_by_role("button", name="Set up two-factor sign-in").click()
    expect(page.locator(".totp-qr svg")).to_be_visible()
    screenshot(page, "settings_two_factor_set_up")
    secret = page.locator("#totp-secret").inner_text().strip()
    page.get_by_label(CODE).fill(code_for(secret))
    page.get_by_role("button", name="Turn on").click()
    expect(page.locator("#recovery-codes li")).to_have_count(10)
    expect(page.locator("#two-factor-status")).to_have_text("On")
    screenshot(page, "settings_two_factor_on")
    page.get_by_role("button", name="I saved them").click()
    expect(page.locator("#recovery-codes")).to_have_count(0)

    page.get_by_role("button", name="Log out").click()
    page.goto("/login/")
    page.get_by_label("Email").fill("owner@settings.test")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Enter your sign-in code")).to_be_visible()
    expect(page.get_by_role("navigation", name="Main")).to_have_count(0)  # not signed in yet
    page.get_by_label(CODE).fill(code_for(secret, steps_ahead=1))  # the set-up's code is spent
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()

    page.goto("/team/")
    page.locator("#team-name").fill("Renamed Research")
    page.get_by_role("button", name="Rename").click()
    expect(page.locator(".flash-success")).to_contain_text("Renamed Research")
    expect(page.locator("header .account-name")).to_have_text("Renamed Research")
    assert refused == []
