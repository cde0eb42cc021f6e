"""chat.selectors.conversation_access_by_id: the principal's own conversation, or one
not-found (ConversationNotFound, a core.errors.NotFound) for a missing id, another
account's, another person's or key's in the same account, and a malformed id."""

import pytest

from accounts.models import ApiKey
from accounts.tests.factories import add_member, make_api_key
from chat.errors import ConversationNotFound
from chat.models import Conversation
from chat.selectors import conversation_access_by_id
from core.errors import NotFound
from core.tenancy import account_context

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation(account_a, owner_a):
    with account_context(account_a):
        return Conversation.objects.for_account(account_a).create(account=account_a, user=owner_a, title="Holidays")


def test_the_owner_gets_it_by_id(account_a, owner_a, conversation):
    with account_context(account_a):
        for conversation_id in (conversation.pk, str(conversation.pk)):
            found = conversation_access_by_id(account=account_a, conversation_id=conversation_id, user=owner_a)
            assert found.pk == conversation.pk


def test_everyone_else_gets_one_not_found(account_a, account_b, owner_a, owner_b, conversation):
    teammate = add_member(account_a)
    make_api_key(account_a)
    with account_context(account_a):
        key = ApiKey.objects.for_account(account_a).get()
        for principal in ({"user": teammate}, {"api_key": key}, {"user": owner_a, "api_key": key}, {}):
            with pytest.raises(ConversationNotFound):
                conversation_access_by_id(account=account_a, conversation_id=conversation.pk, **principal)
        for malformed in ("nope", None, -1, 0, 2**63, True, conversation.pk + 10**6):
            with pytest.raises(ConversationNotFound):
                conversation_access_by_id(account=account_a, conversation_id=malformed, user=owner_a)
    with account_context(account_b), pytest.raises(ConversationNotFound) as refused:
        conversation_access_by_id(account=account_b, conversation_id=conversation.pk, user=owner_b)
    assert isinstance(refused.value, NotFound) and refused.value.status == 404 and refused.value.code == "not_found"


def test_rest_answers_the_contracts_json_404(client, account_b, owner_b, conversation):
    client.force_login(owner_b)
    response = client.get(f"/api/v1/conversations/{conversation.pk}/")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
