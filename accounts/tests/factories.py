"""Test factories for accounts: real rows through the real services."""

from __future__ import annotations

import itertools

from accounts import services
from accounts.models import Account, Role, User
from core.tenancy import account_context

PASSWORD = "correct-horse-battery-staple"
_seq = itertools.count(1)


def make_user(email: str | None = None, password: str = PASSWORD, **extra) -> User:
    email = email or f"user{next(_seq)}@example.test"
    return User.objects.create_user(email=email, password=password, **extra)


def staff_with(*perms: str) -> User:
    """A staff user holding exactly these permissions ("app.codename"), for the admin's tests."""
    from django.contrib.auth.models import Permission

    user = make_user(is_staff=True)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return user


def make_account(name: str = "Team", owner_email: str | None = None, owner: User | None = None) -> Account:
    owner = owner or make_user(owner_email)
    account = services.account_create(name=name, owner=owner)
    account.test_owner = owner
    return account


def add_member(account: Account, user: User | None = None, role: str = Role.MEMBER):
    from accounts.models import Membership

    user = user or make_user()
    with account_context(account):
        Membership.objects.for_account(account).create(account=account, user=user, role=role)
    return user


def make_api_key(account: Account, name: str = "integration") -> str:
    with account_context(account):
        _, raw = services.api_key_create(account=account, actor=None, name=name)
    return raw
