"""What many browser tests do the same way: sign in through the login page."""

from playwright.sync_api import expect

from accounts.tests.factories import PASSWORD


def log_in(page, email: str, password: str = PASSWORD) -> None:
    """Sign in as `email` through /login/ and wait for the dashboard's main navigation."""
    page.goto("/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()
