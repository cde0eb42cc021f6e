"""The chat page: empty states, a conversation's history rendered on the server (escaped,
with what its citations open), and another account's conversation as a 404."""

import json
import re

import pytest

from accounts.tests.factories import add_member
from chat.driver import TurnRun
from chat.models import Conversation, Message
from core.tenancy import account_context


def _cited_documents(account, sources) -> None:
    """The documents the stored sources name, so the reader may still read them (a source
    whose document the reader may no longer read is shown without its name)."""
    from documents.models import Document
    from documents.services import collection_default_ensure

    general = collection_default_ensure(account=account)
    for source in sources:
        Document.objects.for_account(account).get_or_create(
            pk=source["document_id"],
            defaults=dict(
                account=account,
                collection=general,
                name=source["document_name"],
                kind="txt",
                content_type="text/plain",
                size=1,
                sha256=f"{source['document_id']:064d}",
                status="ready",
            ),
        )


def _conversation(account, *, answer, citations=(), sources=()):
    with account_context(account):
        _cited_documents(account, [*citations, *sources])
        conversation = Conversation.objects.for_account(account).create(
            account=account, user=account.test_owner, title="Holiday <b>policy</b>"
        )
        Message.objects.for_account(account).create(
            account=account,
            conversation=conversation,
            role="user",
            content="How many days? <img src=x onerror=alert(1)>",
        )
        Message.objects.for_account(account).create(
            account=account,
            conversation=conversation,
            role="assistant",
            content=answer,
            citations=list(citations),
            sources=list(sources),
            credits_charged=42,
            model="fake-model",
        )
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
    source = {
        "n": 1,
        "document_id": 9,
        "document_name": "<script>x</script>.pdf",
        "chunk_index": 3,
        "pages": [2, 2],
        "score": 0.5,
    }
    conversation = _conversation(
        account_a,
        answer="Twenty-eight **days** [Document 1] <script>alert(1)</script>",
        citations=[{k: source[k] for k in ("n", "document_id", "document_name", "chunk_index", "pages")}],
        sources=[source],
    )
    with django_assert_max_num_queries(20):
        html = client_a.get(f"/chat/{conversation.pk}/").content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "Holiday &lt;b&gt;policy&lt;/b&gt;" in html
    assert "<script>x</script>" not in html
    # The sources panel opens the cited chunk in its document.
    assert 'href="/documents/9/?chunk=3#chunk-3"' in html
    data = json.loads(
        re.search(r'<script id="chat-citations" type="application/json">(.*?)</script>', html, re.S).group(1)
    )
    (cited,) = data.values()
    assert cited[0]["document_id"] == 9 and cited[0]["chunk_index"] == 3
    assert f'data-conversation-id="{conversation.pk}"' in html and "42 credits" in html


def _source(n, name, chunk):
    return {"n": n, "document_id": 10 + n, "document_name": name, "chunk_index": chunk, "pages": None, "score": 0.5}


def _cited(source):
    return {k: source[k] for k in ("n", "document_id", "document_name", "chunk_index", "pages")}


def _answer_sources(html):
    """The block under the (one) answer: its cited list and its 'Also retrieved' group."""
    block = re.search(r'<div class="answer-sources">(.*?)</div>', html, re.S).group(1)
    cited = re.search(r'<ol class="source-list cited-sources">(.*?)</ol>', block, re.S)
    also = re.search(r'<details class="also-retrieved">(.*?)</details>', block, re.S)
    return block, cited and cited.group(1), also and also.group(1)


def test_history_shows_cited_sources_apart_from_retrieved(client_a, account_a):
    sources = [_source(1, "handbook <b>v2</b>.pdf", 3), _source(2, "report.docx", 0), _source(3, "faq.md", 7)]
    conversation = _conversation(
        account_a, answer="Twenty-eight days [Document 1].", citations=[_cited(sources[0])], sources=sources
    )
    html = client_a.get(f"/chat/{conversation.pk}/").content.decode()
    block, cited, also = _answer_sources(html)
    assert ">Cited<" in block and "No sources cited" not in block
    # The cited passage opens its chunk; its name is escaped and in full in the title.
    assert 'href="/documents/11/?chunk=3#chunk-3"' in cited and "handbook &lt;b&gt;v2&lt;/b&gt;.pdf" in cited
    assert 'title="handbook &lt;b&gt;v2&lt;/b&gt;.pdf"' in cited and "<b>v2" not in html
    assert "report.docx" not in cited and "faq.md" not in cited
    # The rest of what was retrieved: separate, collapsed, counted.
    assert "Also retrieved (2)" in also and "report.docx" in also and "faq.md" in also
    assert 'href="/documents/13/?chunk=7#chunk-7"' in also and "handbook" not in also


def test_history_says_plainly_when_nothing_was_cited(client_a, account_a):
    sources = [_source(1, "handbook.pdf", 3), _source(2, "report.docx", 0)]
    conversation = _conversation(account_a, answer="The documents do not say.", citations=[], sources=sources)
    block, cited, also = _answer_sources(client_a.get(f"/chat/{conversation.pk}/").content.decode())
    assert "No sources cited." in block and cited is None
    assert "Also retrieved (2)" in also and "handbook.pdf" in also


def test_history_of_a_general_answer_has_no_sources_block(client_a, account_a):
    conversation = _conversation(account_a, answer="A linked list is a chain of nodes.")
    html = client_a.get(f"/chat/{conversation.pk}/").content.decode()
    assert 'class="answer-sources"' not in html and "No sources cited" not in html


def test_history_keeps_a_stopped_answer_marked_and_long_titles_whole_in_title(client_a, account_a):
    conversation = _conversation(account_a, answer="Twenty")
    with account_context(account_a):
        Message.objects.for_account(account_a).filter(conversation=conversation, role="assistant").update(
            status="cancelled"
        )
    html = client_a.get(f"/chat/{conversation.pk}/").content.decode()
    assert '<p class="turn-state" data-state="stopped">Stopped</p>' in html
    # Titles are cut with an ellipsis by CSS; the full (escaped) title stays in the title attribute.
    assert 'title="Holiday &lt;b&gt;policy&lt;/b&gt;"' in html
    assert 'id="turn-state" role="status" aria-live="polite"' in html


def test_history_shows_what_was_searched_when_it_differs_from_the_question(client_a, account_a):
    if "query" not in {f.name for f in Message._meta.get_fields()}:
        pytest.skip("messages do not keep the searched query in this build")
    conversation = _conversation(
        account_a, answer="It carries over [Document 1].", sources=[_source(1, "handbook.pdf", 3)]
    )
    with account_context(account_a):
        Message.objects.for_account(account_a).filter(conversation=conversation).update(
            query="holiday carry over <i>March</i>"
        )
    html = client_a.get(f"/chat/{conversation.pk}/").content.decode()
    assert '<p class="searched-for">Searched for: <q>holiday carry over &lt;i&gt;March&lt;/i&gt;</q></p>' in html
    with account_context(account_a):
        Message.objects.for_account(account_a).filter(conversation=conversation).update(
            query="  how many DAYS?  <img src=x onerror=alert(1)>"
        )
    assert "Searched for" not in client_a.get(f"/chat/{conversation.pk}/").content.decode()  # as typed


def test_real_turn_shows_in_history(client_a, account_a, handbook):
    result = TurnRun(
        account=account_a, user=account_a.test_owner, question="How much holiday do we get according to the handbook?"
    ).run()
    html = client_a.get(f"/chat/{result['conversation_id']}/").content.decode()
    assert "How much holiday do we get" in html and "Fake answer" in html
    # Whatever the turn retrieved opens its passage (whether retrieval finds the handbook for
    # this question is the router's and search's business, tested there).
    with account_context(account_a):
        answer = Message.objects.for_account(account_a).get(pk=result["message_id"])
    for source in answer.sources:
        assert f'href="/documents/{source["document_id"]}/?chunk={source["chunk_index"]}#' in html


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
