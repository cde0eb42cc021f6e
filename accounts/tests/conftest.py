import pytest


@pytest.fixture(autouse=True)
def _fresh_attempt_counts():
    """Login/sign-up/reset limits count per IP, and every test client is 127.0.0.1: each
    test starts from zero (accounts.ratelimit)."""
    from accounts import ratelimit

    ratelimit.reset_all()
    yield
