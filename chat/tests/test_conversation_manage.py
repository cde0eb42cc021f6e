"""Conversations people manage: `PATCH conversations/{id}/` (rename),
`DELETE conversations/{id}/`, `GET conversations/?q=` (search by title or message text), who
may do it (the principal's own conversations only), and the chat page's search box, rename
and delete controls and the truthful "who can see this" line."""

from __future__ import annotations

import time

import pytest

from accounts.models import ApiKey, Role
from accounts.tests.factories import add_member, make_api_key
from audit.models import AuditEntry
from billing.models import CreditLedgerEntry
from billing.services import credits_debit
from chat.models import Conversation, Message, MessageFeedback
from core.tenancy import account_context

pytestmark = pytest.mark.django_db


def _conversation(
    account, *, user=None, api_key=None, title="Holidays", turns=(("How much holiday?", "Twenty-eight days."),)
) -> Conversation:
    with account_context(account):
        conversation = Conversation.objects.for_account(account).create(
            account=account, user=user, api_key=api_key, title=title
        )
        for question, answer in turns:
            Message.objects.for_account(account).create(
                account=account, conversation=conversation, role="user", content=question
            )
            Message.objects.for_account(account).create(
                account=account, conversation=conversation, role="assistant", content=answer
            )
    return conversation


def _auth(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def _patch(client, conversation_id, body, **extra):
    return client.patch(f"/api/v1/conversations/{conversation_id}/", body, content_type="application/json", **extra)


def _title(account, conversation) -> str:
    with account_context(account):
        return Conversation.objects.for_account(account).get(pk=conversation.pk).title


# --- rename ----------------------------------------------------------------------------------


def test_rename_answers_the_conversation_with_its_new_title(client, account_a, owner_a):
    conversation = _conversation(account_a, user=owner_a)
    client.force_login(owner_a)
    response = _patch(client, conversation.pk, {"title": "  Leave <b>policy</b> & more  "})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == conversation.pk and body["title"] == "Leave <b>policy</b> & more"
    assert body["message_count"] == 2 and set(body) == {"id", "title", "created_at", "updated_at", "message_count"}
    assert _title(account_a, conversation) == "Leave <b>policy</b> & more"
    # 200 characters is the most a title keeps.
    assert _patch(client, conversation.pk, {"title": "x" * 200}).status_code == 200


@pytest.mark.parametrize(
    "body, words",
    [
        ({"title": ""}, "cannot be empty"),
        ({"title": "   "}, "cannot be empty"),
        ({}, "must be text"),
        ({"title": None}, "must be text"),
        ({"title": 7}, "must be text"),
        ({"title": ["a"]}, "must be text"),
        ({"title": "x" * 300}, "300 characters"),
        ({"title": "two\nlines"}, "control characters"),
        ({"title": "tab\there"}, "control characters"),
        ({"title": "bell\x07"}, "control characters"),
        ({"title": "a\u202eb"}, "control characters"),
    ],
)
def test_a_bad_title_is_a_400_saying_what_is_wrong(client, account_a, owner_a, body, words):
    conversation = _conversation(account_a, user=owner_a)
    client.force_login(owner_a)
    response = _patch(client, conversation.pk, body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_title" and error["field"] == "title" and words in error["message"]
    assert _title(account_a, conversation) == "Holidays"


def test_a_nul_in_the_body_is_refused_before_the_title_is_read(client, account_a, owner_a):
    conversation = _conversation(account_a, user=owner_a)
    client.force_login(owner_a)
    for body in ('{"title": "nul\\u0000"}', '{"title": "a\\u202eb"}'):
        response = _patch(client, conversation.pk, body)
        assert response.status_code == 400 and response.json()["error"]["code"] in (
            "malformed_request",
            "invalid_title",
        )
    assert _title(account_a, conversation) == "Holidays"


def test_a_bad_title_is_a_400_whatever_the_id(client, account_a, owner_a):
    client.force_login(owner_a)
    assert _patch(client, 10**9, {"title": ""}).json()["error"]["code"] == "invalid_title"


# --- who may: isolation and roles ------------------------------------------------------------


def test_no_one_else_may_rename_delete_or_regenerate_it(client, account_a, account_b, owner_a, owner_b):
    conversation = _conversation(account_a, user=owner_a)
    teammate = add_member(account_a, role=Role.ADMIN)
    others = [{"user": owner_b}, {"user": teammate}, {"key": make_api_key(account_a)}, {"key": make_api_key(account_b)}]
    for other in others:
        client.logout()
        extra = {}
        if "user" in other:
            client.force_login(other["user"])
        else:
            extra = _auth(other["key"])
        url = f"/api/v1/conversations/{conversation.pk}/"
        answers = [
            _patch(client, conversation.pk, {"title": "Mine now"}, **extra),
            client.delete(url, **extra),
            client.post(url + "regenerate/", {}, content_type="application/json", **extra),
            client.get(url, **extra),
        ]
        for response in answers:
            assert response.status_code == 404, (other, response.content)
            assert response.json()["error"]["code"] == "not_found"
    assert _title(account_a, conversation) == "Holidays"
    with account_context(account_a):
        assert Message.objects.for_account(account_a).filter(conversation=conversation).count() == 2


def test_a_key_manages_its_own_conversations_not_its_creators(client, account_a, owner_a):
    key = make_api_key(account_a)
    with account_context(account_a):
        api_key = ApiKey.objects.for_account(account_a).get()
    persons = _conversation(account_a, user=owner_a, title="The owner's")
    keys = _conversation(account_a, api_key=api_key, title="The key's")
    assert _patch(client, persons.pk, {"title": "x"}, **_auth(key)).status_code == 404
    assert _patch(client, keys.pk, {"title": "Renamed by the key"}, **_auth(key)).status_code == 200
    assert client.delete(f"/api/v1/conversations/{keys.pk}/", **_auth(key)).status_code == 204
    with account_context(account_a):
        entry = AuditEntry.objects.for_account(account_a).get(action="conversation.delete")
    assert entry.actor_kind == "key"


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER, Role.ADMIN])
def test_every_role_manages_its_own_conversations(client, account_a, role):
    """The permissions table: `chat` (ask, and one's own conversations) is every role's."""
    person = add_member(account_a, role=role)
    conversation = _conversation(account_a, user=person)
    client.force_login(person)
    assert _patch(client, conversation.pk, {"title": "Mine"}).status_code == 200
    assert client.get("/api/v1/conversations/?q=mine").json()["results"][0]["id"] == conversation.pk
    assert client.delete(f"/api/v1/conversations/{conversation.pk}/").status_code == 204


# --- delete ----------------------------------------------------------------------------------


def test_delete_removes_messages_and_feedback_keeps_the_ledger_and_is_audited(client, account_a, owner_a):
    conversation = _conversation(account_a, user=owner_a, turns=[("Q1?", "A1."), ("Q2?", "A2.")])
    kept = _conversation(account_a, user=owner_a, title="Another")
    with account_context(account_a):
        answer = Message.objects.for_account(account_a).filter(conversation=conversation, role="assistant").first()
        MessageFeedback.objects.for_account(account_a).create(
            account=account_a, message=answer, user=owner_a, rating="down"
        )
        credits_debit(account=account_a, tokens=10, key="turn", kind="chat", reference=f"message:{answer.pk}")
        ledger = list(
            CreditLedgerEntry.objects.for_account(account_a).order_by("pk").values_list("pk", "delta", "reference")
        )
    client.force_login(owner_a)
    response = client.delete(f"/api/v1/conversations/{conversation.pk}/")
    assert response.status_code == 204 and response.content == b""
    with account_context(account_a):
        assert not Conversation.objects.for_account(account_a).filter(pk=conversation.pk).exists()
        assert not Message.objects.for_account(account_a).filter(conversation_id=conversation.pk).exists()
        assert not MessageFeedback.objects.for_account(account_a).exists()
        assert Message.objects.for_account(account_a).filter(conversation=kept).count() == 2
        assert (
            list(
                CreditLedgerEntry.objects.for_account(account_a).order_by("pk").values_list("pk", "delta", "reference")
            )
            == ledger
        )
        entry = AuditEntry.objects.for_account(account_a).get(action="conversation.delete")
    assert entry.target == f"conversation:{conversation.pk}" and entry.detail == {"messages": 4}
    assert entry.actor_id == owner_a.pk
    # The title (the person's own words, private to them) is not written to the admins' log.
    assert "Holidays" not in str(entry.detail) + entry.target
    assert client.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 404
    assert client.delete(f"/api/v1/conversations/{conversation.pk}/").status_code == 404


# --- search ----------------------------------------------------------------------------------


def test_search_finds_by_title_or_message_text_case_insensitively(client, account_a, account_b, owner_a, owner_b):
    by_title = _conversation(account_a, user=owner_a, title="Parental LEAVE", turns=[("Hi", "Hello.")])
    by_question = _conversation(
        account_a, user=owner_a, title="Misc", turns=[("How long is parental leave?", "Ask HR.")]
    )
    by_answer = _conversation(
        account_a, user=owner_a, title="Other", turns=[("And fathers?", "Sixteen weeks of Leave [Document 1].")]
    )
    _conversation(account_a, user=owner_a, title="Laptops", turns=[("Which laptop?", "A ThinkPad.")])
    # Another person's and another account's conversations say "leave" too.
    _conversation(account_a, user=add_member(account_a, role=Role.ADMIN), title="Leave for the admin")
    _conversation(account_b, user=owner_b, title="Leave in account B")
    client.force_login(owner_a)
    body = client.get("/api/v1/conversations/?q=leave").json()
    assert {c["id"] for c in body["results"]} == {by_title.pk, by_question.pk, by_answer.pk}
    assert body["results"][0]["id"] == by_answer.pk and body["results"][0]["message_count"] == 2
    # LIKE's wildcards are the text itself.
    assert client.get("/api/v1/conversations/?q=%25").json()["results"] == []
    assert client.get("/api/v1/conversations/?q=_").json()["results"] == []
    # No q, or only spaces: every one of the person's own.
    assert len(client.get("/api/v1/conversations/?q=%20%20").json()["results"]) == 4
    client.force_login(owner_b)
    assert [c["title"] for c in client.get("/api/v1/conversations/?q=leave").json()["results"]] == [
        "Leave in account B"
    ]


def test_a_keys_search_is_its_own_conversations(client, account_a, owner_a):
    key = make_api_key(account_a)
    with account_context(account_a):
        api_key = ApiKey.objects.for_account(account_a).get()
    _conversation(account_a, user=owner_a, title="Owner's leave")
    keys = _conversation(account_a, api_key=api_key, title="Key's leave")
    body = client.get("/api/v1/conversations/?q=leave", **_auth(key)).json()
    assert [c["id"] for c in body["results"]] == [keys.pk]


@pytest.mark.parametrize(
    "q, words", [("x" * 201, "at most 200"), ("a\x00b", "control characters"), ("two\nlines", "control characters")]
)
def test_a_bad_search_is_a_400(client, owner_a, q, words):
    client.force_login(owner_a)
    response = client.get("/api/v1/conversations/", {"q": q})
    assert response.status_code == 400
    error = response.json()["error"]
    # (A NUL is refused before any view reads the query string.)
    assert (
        error["code"] == "bad_request"
        if "\x00" in q
        else (error["code"] == "invalid_query" and error["field"] == "q" and words in error["message"])
    )
    assert client.get("/api/v1/conversations/", {"q": "x" * 200}).status_code == 200


def test_search_over_thousands_of_messages_pages_in_few_queries(
    client, account_a, account_b, owner_a, owner_b, django_assert_max_num_queries
):
    """Measured: 3,000 of the person's messages (and 3,000 of another account's), searched
    for a word in 1 of their 60 conversations and for one in every conversation, paged."""
    rows = []
    with account_context(account_a):
        for i in range(60):
            conversation = Conversation.objects.for_account(account_a).create(
                account=account_a, user=owner_a, title=f"Conversation {i}"
            )
            for j in range(50):
                word = "zanzibar" if (i, j) == (17, 33) else "holiday"
                rows.append(
                    Message(
                        account=account_a,
                        conversation=conversation,
                        role="user" if j % 2 else "assistant",
                        content=f"Message {j} about the {word} policy, with some more words to read.",
                    )
                )
        Message.objects.for_account(account_a).bulk_create(rows)
    with account_context(account_b):
        conversation = Conversation.objects.for_account(account_b).create(account=account_b, user=owner_b)
        Message.objects.for_account(account_b).bulk_create(
            [Message(account=account_b, conversation=conversation, role="user", content="zanzibar " * 10)] * 3000
        )
    client.force_login(owner_a)
    started = time.monotonic()
    with django_assert_max_num_queries(12):
        body = client.get("/api/v1/conversations/?q=ZANZIBAR").json()
    assert [c["title"] for c in body["results"]] == ["Conversation 17"]
    seen, url = 0, "/api/v1/conversations/?q=holiday&page_size=25"
    while url:
        with django_assert_max_num_queries(12):
            body = client.get(url).json()
        seen += len(body["results"])
        url = body["next"]
    assert seen == 60
    # Generous for two shared cores; on this machine both searches take a few tens of ms.
    assert time.monotonic() - started < 5


# --- the chat page ---------------------------------------------------------------------------


def test_page_searches_with_the_same_selector_and_escapes(client, account_a, owner_a):
    mine = _conversation(
        account_a,
        user=owner_a,
        title="<img src=x onerror=alert(1)> leave",
        turns=[("<script>alert(2)</script>", "Fine.")],
    )
    _conversation(account_a, user=owner_a, title="Laptops")
    _conversation(account_a, user=add_member(account_a), title="A teammate's leave")
    client.force_login(owner_a)
    html = client.get("/chat/", {"q": "LEAVE"}).content.decode()
    assert f'data-conversation-id="{mine.pk}"' in html and 'title="Laptops"' not in html
    assert "A teammate&#x27;s leave" not in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt; leave" in html
    assert "1 conversation with “LEAVE”" in html
    html = client.get("/chat/", {"q": "<b>zzz</b>"}).content.decode()
    assert "None of your conversations has this text." in html and "<b>zzz</b>" not in html
    assert "&lt;b&gt;zzz&lt;/b&gt;" in html
    html = client.get("/chat/", {"q": "x" * 201}).content.decode()
    assert 'id="search-error"' in html and "at most 200" in html and 'title="Laptops"' in html
    page = client.get(f"/chat/{mine.pk}/").content.decode()
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page and "<script>alert(2)" not in page


def test_page_says_truthfully_who_sees_conversations(client, account_a, owner_a):
    conversation = _conversation(account_a, user=owner_a)
    client.force_login(owner_a)
    html = client.get(f"/chat/{conversation.pk}/").content.decode()
    assert "Only you can see your conversations" in html and "for your team" not in html
    assert 'id="rename-button"' in html and 'id="delete-dialog"' in html
    home = client.get("/").content.decode()
    assert "Shared with your team" not in home


def test_the_benchs_previous_turn_skips_an_answers_earlier_versions(account_a, owner_a):
    from chat.selectors import feedback_regression_cases

    conversation = _conversation(account_a, user=owner_a, turns=[("Q1?", "A1, first version.")])
    with account_context(account_a):
        make = Message.objects.for_account(account_a).create
        old = Message.objects.for_account(account_a).get(conversation=conversation, role="assistant")
        new = make(account=account_a, conversation=conversation, role="assistant", content="A1, regenerated.")
        Message.objects.for_account(account_a).filter(pk=old.pk).update(replaced_by=new)
        make(account=account_a, conversation=conversation, role="user", content="Q2?")
        answer = make(account=account_a, conversation=conversation, role="assistant", content="A2.")
        MessageFeedback.objects.for_account(account_a).create(
            account=account_a, message=answer, user=owner_a, rating="down"
        )
        [case] = feedback_regression_cases(account=account_a)
    assert (case["question"], case["previous_question"], case["previous_answer"]) == ("Q2?", "Q1?", "A1, regenerated.")


# --- default titles ----------------------------------------------------------------------------


def _ask(client, message, conversation_id=None, **extra):
    body = {"message": message, **({"conversation_id": conversation_id} if conversation_id else {})}
    response = client.post("/api/v1/chat/", body, content_type="application/json", **extra)
    assert response.status_code == 200, response.content
    return response.json()["conversation_id"]


def _titles(client) -> dict[int, str]:
    return {c["id"]: c["title"] for c in client.get("/api/v1/conversations/").json()["results"]}


@pytest.mark.django_db(transaction=True)
def test_small_talk_does_not_name_a_conversation_the_first_real_question_does(client_a, account_a, handbook, fake_llm):
    conversation_id = _ask(client_a, "hi")
    assert _titles(client_a)[conversation_id] == ""
    page = client_a.get(f"/chat/{conversation_id}/").content.decode()
    assert "Untitled conversation" in page and ">hi<" not in page.split('id="conversation-list"')[-1][:2000]
    _ask(client_a, "Thanks!", conversation_id)
    assert _titles(client_a)[conversation_id] == ""
    _ask(client_a, "How much paid holiday do we get?", conversation_id)
    assert _titles(client_a)[conversation_id] == "How much paid holiday do we get?"
    _ask(client_a, "And who receives a laptop?", conversation_id)  # the first question keeps naming it
    assert _titles(client_a)[conversation_id] == "How much paid holiday do we get?"


@pytest.mark.django_db(transaction=True)
def test_a_long_first_question_is_trimmed_at_a_word_boundary(client_a, account_a, handbook, fake_llm):
    question = (
        "Could you please tell me how much paid holiday everyone at Acme gets every year, and whether "
        "unused days carry over until March?"
    )
    conversation_id = _ask(client_a, question)
    title = _titles(client_a)[conversation_id]
    assert title == "Could you please tell me how much paid holiday everyone at…"
    assert len(title) <= 61 and question.startswith(title[:-1])


@pytest.mark.django_db(transaction=True)
def test_a_title_the_person_set_is_never_overridden(client_a, account_a, handbook, fake_llm):
    conversation_id = _ask(client_a, "Hello!")
    assert _patch(client_a, conversation_id, {"title": "Onboarding"}).status_code == 200
    _ask(client_a, "How much paid holiday do we get?", conversation_id)
    assert _titles(client_a)[conversation_id] == "Onboarding"
