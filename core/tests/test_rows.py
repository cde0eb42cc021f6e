"""core.rows: the hot path's rows are the rows the ORM would write and read, in one account."""

from __future__ import annotations

import pytest
from django.db.models import signals

from accounts.models import ApiKey
from accounts.services import api_key_create
from chat.models import Conversation, Message, MessageStatus, Role
from core import rows
from core.tenancy import account_context

pytestmark = pytest.mark.django_db


def _fields(obj) -> dict:
    return {
        f.attname: getattr(obj, f.attname)
        for f in type(obj)._meta.concrete_fields
        if f.attname not in ("id", "created_at", "updated_at", "conversation_id")
    }


def test_insert_writes_what_create_writes(account_a):
    with account_context(account_a):
        conversation = rows.insert(Conversation, account_id=account_a.pk, title="Leave")
        values = dict(
            account_id=account_a.pk,
            conversation=conversation,
            role=Role.ASSISTANT,
            content="Ten days.",
            sources=[{"n": 1, "document_name": "<b>x</b>", "pages": [1, 2]}],
            citations=[{"n": 1}],
            model="m",
            total_tokens=7,
        )
        fast = rows.insert(Message, **values)
        slow = Message.objects.for_account(account_a).create(**values)
        stored = Message.objects.for_account(account_a).get(pk=fast.pk)
        again = Message.objects.for_account(account_a).get(pk=slow.pk)
        touched = Conversation.objects.for_account(account_a).get(pk=conversation.pk)
    assert touched.updated_at is not None and touched.created_at is not None
    assert _fields(stored) == _fields(again)
    assert stored.sources == [{"n": 1, "document_name": "<b>x</b>", "pages": [1, 2]}]  # JSON, not a string
    assert stored.status == MessageStatus.COMPLETE and stored.created_at is not None  # defaults, auto_now_add
    assert fast.pk == stored.pk and not fast._state.adding


def test_insert_needs_an_account_and_row_level_security_holds(account_a, account_b):
    with pytest.raises(ValueError):
        rows.insert(Conversation, title="no account")
    with pytest.raises(Exception) as refused, account_context(account_b):
        rows.insert(Conversation, account_id=account_a.pk, title="into A from B's context")
    assert "row-level security" in str(refused.value)


def test_select_one_and_update_stay_in_their_account(account_a, account_b):
    with account_context(account_a):
        _, raw = api_key_create(account=account_a, actor=None, name="ci")
        key = ApiKey.objects.for_account(account_a).get()
        conversation = rows.insert(Conversation, account_id=account_a.pk, title="A's")
        found = rows.select_one(ApiKey, "WHERE t.id = %s", [key.pk])
        assert (found.pk, found.key_hash, found.scope, found.account_id) == (
            key.pk,
            key.key_hash,
            key.scope,
            account_a.pk,
        )
        assert rows.select_one(ApiKey, "WHERE t.id = %s", [-1]) is None
    with account_context(account_b):
        assert rows.select_one(ApiKey, "WHERE t.id = %s", [key.pk]) is None  # RLS: not B's
        assert rows.update(Conversation, pk=conversation.pk, account_id=account_a.pk, title="B was here") == 0
        assert rows.update(Conversation, pk=conversation.pk, account_id=account_b.pk, title="B was here") == 0
    with account_context(account_a):
        assert rows.update(Conversation, pk=conversation.pk, account_id=account_a.pk, title="Renamed") == 1
        assert Conversation.objects.for_account(account_a).get(pk=conversation.pk).title == "Renamed"


@pytest.mark.parametrize("model", [Conversation, Message])
def test_models_written_by_rows_have_no_signal_receivers_or_save_of_their_own(model):
    """rows.insert/update neither send signals nor call save(): a receiver or a save()
    override added later would silently miss these rows, so this fails first."""
    from django.db import models

    for signal in (signals.pre_save, signals.post_save):
        assert not signal.has_listeners(model), f"{model.__name__} has a {signal} receiver: core.rows skips it"
    assert model.save is models.Model.save, f"{model.__name__}.save() is overridden: core.rows skips it"


def test_select_one_loads_related_rows_like_select_related(account_a, owner_a, django_assert_num_queries):
    from accounts.selectors import api_key_for_secret

    with account_context(account_a):
        _, with_creator = api_key_create(account=account_a, actor=owner_a, name="made by a person")
        _, without = api_key_create(account=account_a, actor=None, name="made by a script")
    for raw, creator in ((with_creator, owner_a), (without, None)):
        key = api_key_for_secret(raw=raw)
        with django_assert_num_queries(0):  # joined, as select_related would have
            assert key.account == account_a and key.account.name == account_a.name
            assert key.created_by == creator
            assert creator is None or key.created_by.email == owner_a.email
    with account_context(account_a):
        ApiKey.objects.for_account(account_a).update(revoked_at=account_a.created_at)
    assert api_key_for_secret(raw=with_creator) is None
