"""Issue 10, item 14 in a browser: an owner caps a member's daily credits on the Team page
(with a thousands separator), a wrong limit says why, and the member sees what is left on the
Credits page and beside the balance, on a 375px phone too."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from accounts.models import Role
from accounts.tests.factories import PASSWORD, add_member, make_account, make_user

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fresh_attempt_counts():
    from accounts import ratelimit

    ratelimit.reset_all()


def _log_in(page, email):
    page.goto("/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()


def _fits(page):
    widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], f"{page.url} scrolls sideways: scrollWidth {widths[0]} > clientWidth {widths[1]}"


def test_owner_sets_a_budget_and_the_member_sees_what_is_left(new_page, screenshot, stack):
    account = make_account("Budgeted", owner_email="owner@budget.test")
    add_member(account, make_user("a.member.with.a.rather.long.address@subdomain.budget.test"), role=Role.MEMBER)

    owner = new_page()
    _log_in(owner, "owner@budget.test")
    owner.goto("/team/")
    form = owner.locator("#budget-form")
    form.get_by_label("Member or key").select_option(label="a.member.with.a.rather.long.address@subdomain.budget.test")
    form.get_by_label("Period").select_option("day")
    form.get_by_label("Limit in credits").fill("five thousand")
    form.get_by_role("button", name="Set budget").click()
    expect(owner.get_by_role("alert")).to_contain_text("The limit must be a whole number of credits")
    form.get_by_label("Member or key").select_option(label="a.member.with.a.rather.long.address@subdomain.budget.test")
    form.get_by_label("Limit in credits").fill("5,000")
    form.get_by_role("button", name="Set budget").click()
    expect(owner.locator("#budgets-table")).to_contain_text("5,000")
    expect(owner.locator("#budgets-table td[data-label='Left']")).to_have_text("5,000")

    member = new_page(width=375, height=740)
    _log_in(member, "a.member.with.a.rather.long.address@subdomain.budget.test")
    member.goto("/credits/")
    expect(member.locator("#budget-list")).to_contain_text("5,000 of your daily 5,000 credits left")
    expect(member.locator("#header-budget")).to_contain_text("5,000 left today")
    _fits(member)
    screenshot(member, "budget_credits_375px")
    owner.goto("/team/")
    _fits(owner)
