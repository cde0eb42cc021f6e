"""The chat page: empty states, a conversation's history rendered on the server (escaped,
with what its citations open), and another account's conversation as a 404."""
import json
import re

from core.tenancy import account_context
from accounts.tests.factories import add_member
from chat.driver import TurnRun
from chat.models import Conversation, Message


def _conversation(account, *, answer, citations=(), sources=()):
    with account_context(account):
        conversation = Conversation.objects.for_account(account).create(account=account, user=account.test_owner,
                                                                        title="Holiday <b>policy</b>")
        Message.objects.for_account(account).create(account=account, conversation=conversation, role="user",
                                                    content="How many days? <img src=x onerror=alert(1)>")
        Message.objects.for_account(account).create(account=account, conversation=conversation, role="assistant",
                                                    content=answer, citations=list(citations), sources=list(sources),
                                                    credits_charged=42, model="fake-model")
    return conversation


def test_empty_chat_tells_a_new_user_to_upload_first(client_a):
    page = client_a.get("/chat/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "Add documents first" in html and "/documents/" in html
    assert "No conversations yet" in html
    assert 'data-ws-path="/ws/chat/"' in html and 'id="stop-button"' in html
    assert 'for="chat-input"' in html  # the question box is labelled


def test_chat_with_ready_documents_invites_a_first_question(client_a, handbook):
    assert "Ask a first question" in client_a.get("/chat/").content.decode()


def test_conversation_history_is_escaped_and_links_citations(client_a, account_a, django_assert_max_num_queries):
    source = {"n": 1, "document_id": 9, "document_name": "<script>x</script>.pdf", "chunk_index": 3,
              "pages": [2, 2], "score": 0.5}
    conversation = _conversation(account_a, answer="Twenty-eight **days** [Document 1] <script>alert(1)</script>",
                                 citations=[{k: source[k] for k in ("n", "document_id", "document_name",
                                                                    "chunk_index", "pages")}],
                                 sources=[source])
    with django_assert_max_num_queries(20):
        html = client_a.get(f"/chat/{conversation.pk}/").content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "Holiday &lt;b&gt;policy&lt;/b&gt;" in html
    assert "<script>x</script>" not in html
    # The sources panel opens the cited chunk in its document.
    assert 'href="/documents/9/?chunk=3#chunk-3"' in html
    data = json.loads(re.search(r'<script id="chat-citations" type="application/json">(.*?)</script>', html,
                                re.S).group(1))
    (cited,) = data.values()
    assert cited[0]["document_id"] == 9 and cited[0]["chunk_index"] == 3
    assert f'data-conversation-id="{conversation.pk}"' in html and "42 credits" in html


def test_real_turn_shows_in_history(client_a, account_a, handbook):
    result = TurnRun(account=account_a, user=account_a.test_owner,
                     question="How much holiday do we get according to the handbook?").run()
    html = client_a.get(f"/chat/{result['conversation_id']}/").content.decode()
    assert "How much holiday do we get" in html and "Fake answer" in html
    assert f'href="/documents/{handbook.pk}/?chunk=' in html


def test_another_accounts_conversation_is_404(client, account_a, account_b, owner_b):
    conversation = _conversation(account_a, answer="secret answer")
    client.force_login(owner_b)
    assert client.get(f"/chat/{conversation.pk}/").status_code == 404
    assert "secret answer" not in client.get("/chat/").content.decode()
    assert "Holiday" not in client.get("/chat/").content.decode()


def test_members_can_chat(client, account_a):
    client.force_login(add_member(account_a))
    assert client.get("/chat/").status_code == 200


def test_anonymous_is_sent_to_login(client, db):
    assert client.get("/chat/")["Location"].startswith("/login/")
