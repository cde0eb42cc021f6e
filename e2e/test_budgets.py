"""Budgets in a browser: an owner caps a member's daily credits on the Team page
(with a thousands separator), a wrong limit says why, and the member sees what is left on the
Credits page and beside the balance, on a 375px phone too."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from accounts.models import Role
from accounts.tests.factories import add_member, make_account, make_user
from e2e.pages import log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _fits(page):
    widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], f"{page.url} scrolls sideways: scrollWidth {widths[0]} > clientWidth {widths[1]}"


def test_owner_sets_a_budget_and_the_member_sees_what_is_left(new_page, screenshot, stack):
    account = make_account("Budgeted", owner_email="owner@budget.test")
    add_member(account, make_user("a.member.with.a.rather.long.address@subdomain.budget.test"), role=Role.MEMBER)

    owner = new_page()
    log_in(owner, "owner@budget.test")
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
    log_in(member, "a.member.with.a.rather.long.address@subdomain.budget.test")
    member.goto("/credits/")
    expect(member.locator("#budget-list")).to_contain_text("5,000 of your daily 5,000 credits left")
    expect(member.locator("#header-budget")).to_contain_text("5,000 left today")
    _fits(member)
    screenshot(member, "budget_credits_375px")
    owner.goto("/team/")
    _fits(owner)


def test_the_header_budget_refreshes_after_each_chat_answer(new_page, stack):
    """The header's "N left today" follows chat.done's budget_remaining, like the balance."""
    from billing.budgets import budget_set, budget_status_for
    from billing.services import credits_grant
    from core.tenancy import account_context

    account = make_account("Chatty", owner_email="owner@chatty.test")
    member = add_member(account, make_user("member@chatty.test"), role=Role.MEMBER)
    with account_context(account):
        credits_grant(account=account, amount=100_000, reason="e2e credits", key="e2e")
        budget_set(account=account, actor=account.test_owner, period="day", limit=50_000, user_id=member.pk)

    page = new_page()
    log_in(page, "member@chatty.test")
    page.goto("/chat/")
    expect(page.locator("#connection")).to_have_text("Connected")
    left = page.locator("#header-budget [data-budget-left]")
    expect(left).to_have_text("50,000")
    question = page.get_by_label("Your question")
    question.fill("What does the handbook say about holidays?")
    question.press("Enter")
    expect(page.locator(".message.assistant.streaming")).to_have_count(0, timeout=20_000)
    expect(left).not_to_have_text("50,000", timeout=20_000)
    with account_context(account):
        [status] = budget_status_for(account=account, user=member)
    assert 0 < status.spent < 50_000
    expect(left).to_have_text(f"{status.remaining:,}")
    expect(page.locator("#header-budget")).to_contain_text("left today")
