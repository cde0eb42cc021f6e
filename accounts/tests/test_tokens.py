"""The one lifecycle of API keys and SCIM tokens (accounts/tokens.py): issued once, stored as
a hash, found by it, stamped when used, revoked for good, audited; each kind's secrets work
only as that kind."""

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.errors import AccountError
from accounts.models import ApiKey, ScimToken
from accounts.tokens import secret_access_by_id, secret_authenticate, secret_issue, secret_revoke, secret_touch
from audit.models import AuditEntry
from core.tenancy import account_context

KINDS = [
    pytest.param(ApiKey, {"scope": "read"}, "gw_", "key", id="api_key"),
    pytest.param(ScimToken, {}, "gwscim_", "scim_token", id="scim_token"),
]


def _audit(account, action):
    with account_context(account):
        return list(AuditEntry.objects.for_account(account).filter(action=action).values_list("target", flat=True))


@pytest.mark.parametrize("model, fields, start, audit_name", KINDS)
def test_issued_once_stored_as_its_hash_and_found_by_it(model, fields, start, audit_name, account_a, owner_a):
    with account_context(account_a):
        row, raw = secret_issue(model, account=account_a, actor=owner_a, name="okta", **fields)
        stored = model.objects.for_account(account_a).filter(pk=row.pk).values()[0]
    assert raw.startswith(start) and len(raw) > 40
    assert stored[model.HASH_FIELD] == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in {str(value) for value in stored.values()}
    assert row.prefix == raw[: model.PREFIX_LENGTH] and row.created_by == owner_a
    assert _audit(account_a, f"{audit_name}.create") == [f"okta ({row.prefix}…)"]

    found = secret_authenticate(model, raw=raw)
    assert found.pk == row.pk and found.account == account_a and found.created_by == owner_a
    assert secret_authenticate(model, raw=raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None
    assert secret_authenticate(model, raw=raw + "x" * 200) is None
    assert secret_authenticate(model, raw="") is None and secret_authenticate(model, raw=None) is None


def test_a_secret_works_only_as_its_own_kind(account_a, owner_a):
    with account_context(account_a):
        _, key = secret_issue(ApiKey, account=account_a, actor=owner_a, name="k")
        _, token = secret_issue(ScimToken, account=account_a, actor=owner_a, name="t")
    assert secret_authenticate(ScimToken, raw=key) is None
    assert secret_authenticate(ApiKey, raw=token) is None
    # The same hash under the other kind's prefix is not found either.
    assert secret_authenticate(ScimToken, raw="gwscim_" + key.removeprefix("gw_")) is None


@pytest.mark.parametrize("model, fields, start, audit_name", KINDS)
def test_a_row_made_before_still_authenticates(model, fields, start, audit_name, account_a, owner_a):
    """Secrets issued by earlier releases: a SHA-256 hex of the whole secret, prefix and all."""
    raw = start + "an-older-secret-of-forty-three-characters-xyz"
    with account_context(account_a):
        row = model.objects.for_account(account_a).create(
            account=account_a,
            name="old",
            prefix=raw[: model.PREFIX_LENGTH],
            created_by=owner_a,
            **{model.HASH_FIELD: hashlib.sha256(raw.encode()).hexdigest()},
            **fields,
        )
    assert secret_authenticate(model, raw=raw).pk == row.pk


@pytest.mark.parametrize("model, fields, start, audit_name", KINDS)
def test_revoked_for_good_once_audited(model, fields, start, audit_name, account_a, owner_a):
    with account_context(account_a):
        row, raw = secret_issue(model, account=account_a, actor=owner_a, name="zap", **fields)
        assert secret_revoke(row, account=account_a, actor=owner_a, detail={"reason": "rotated"}) is True
        assert secret_revoke(row, account=account_a, actor=owner_a) is False
        assert not model.objects.for_account(account_a).get(pk=row.pk).is_active
        [entry] = AuditEntry.objects.for_account(account_a).filter(action=f"{audit_name}.revoke")
    assert entry.target == f"zap ({row.prefix}…)" and entry.detail == {"reason": "rotated"}
    assert secret_authenticate(model, raw=raw) is None


@pytest.mark.parametrize("model, fields, start, audit_name", KINDS)
def test_a_deleted_accounts_secret_is_not_found(model, fields, start, audit_name, account_a, owner_a):
    with account_context(account_a):
        _, raw = secret_issue(model, account=account_a, actor=owner_a, name="n", **fields)
    account_a.deleted_at = timezone.now()
    account_a.save(update_fields=["deleted_at"])
    assert secret_authenticate(model, raw=raw) is None


@pytest.mark.parametrize("model, fields, start, audit_name", KINDS)
def test_use_is_stamped_at_most_once_a_minute(model, fields, start, audit_name, account_a, owner_a):
    with account_context(account_a):
        row, raw = secret_issue(model, account=account_a, actor=owner_a, name="busy", **fields)
        found = secret_authenticate(model, raw=raw)
        secret_touch(found)
        first = model.objects.for_account(account_a).get(pk=row.pk).last_used_at
        assert first is not None
        secret_touch(found)
        assert model.objects.for_account(account_a).get(pk=row.pk).last_used_at == first
        found.last_used_at = first - timedelta(seconds=61)
        secret_touch(found)
        assert model.objects.for_account(account_a).get(pk=row.pk).last_used_at > first


@pytest.mark.parametrize("model, fields, start, audit_name", KINDS)
def test_another_accounts_secret_is_not_found_by_id(model, fields, start, audit_name, account_a, owner_a, account_b):
    with account_context(account_a):
        row, _ = secret_issue(model, account=account_a, actor=owner_a, name="mine", **fields)
        assert secret_access_by_id(model, account=account_a, secret_id=row.pk).pk == row.pk
    with account_context(account_b), pytest.raises(AccountError) as refused:
        secret_access_by_id(model, account=account_b, secret_id=row.pk)
    assert refused.value.status == 404 and refused.value.message == model.NOT_FOUND_MESSAGE
