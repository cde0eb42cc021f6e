"""Feedback on answers: `POST messages/{id}/feedback/` (one per
person or key and message, a second replaces the first), `GET feedback/` for owners and
admins, the regression cases the bench replays, and who may see which answer."""

from __future__ import annotations

import pytest

from accounts.models import ApiKey, Role
from accounts.tests.factories import add_member, make_api_key
from chat import selectors
from chat.models import Conversation, Message, MessageFeedback
from core.tenancy import account_context

CITATION = {"n": 1, "document_id": 1, "document_name": "handbook.md", "chunk_index": 0, "pages": None}


def _turns(
    account,
    *,
    user=None,
    api_key=None,
    turns=(("How much holiday?", "Twenty-eight days [Document 1]."),),
    citation=CITATION,
):
    """A conversation of `turns` (question, answer), stored as a turn stores them; its answers."""
    with account_context(account):
        conversation = Conversation.objects.for_account(account).create(
            account=account, user=user, api_key=api_key, title=turns[0][0]
        )
        answers = []
        for question, answer in turns:
            Message.objects.for_account(account).create(
                account=account, conversation=conversation, role="user", content=question
            )
            answers.append(
                Message.objects.for_account(account).create(
                    account=account,
                    conversation=conversation,
                    role="assistant",
                    content=answer,
                    citations=[citation],
                    sources=[citation],
                )
            )
    return answers


def _post(client, message_id, body, **extra):
    return client.post(f"/api/v1/messages/{message_id}/feedback/", body, content_type="application/json", **extra)


def _count(account) -> int:
    with account_context(account):
        return MessageFeedback.objects.for_account(account).count()


def test_feedback_is_stored_and_a_second_replaces_the_first(client, account_a, owner_a):
    answer = _turns(account_a, user=owner_a)[0]
    client.force_login(owner_a)
    first = _post(client, answer.pk, {"rating": "down", "comment": "It missed the March rule.\nSee page 2."})
    assert first.status_code == 201, first.content
    assert first.json()["rating"] == "down" and first.json()["question"] == "How much holiday?"
    assert first.json()["comment"] == "It missed the March rule.\nSee page 2."
    second = _post(client, answer.pk, {"rating": "up"})
    assert second.status_code == 201 and second.json()["rating"] == "up" and second.json()["comment"] == ""
    assert _count(account_a) == 1


@pytest.mark.parametrize(
    "body, field",
    [
        ({"rating": "meh"}, "rating"),
        ({}, "rating"),
        ({"rating": ["up"]}, "rating"),
        ({"rating": True}, "rating"),
        ({"rating": "down", "comment": "x" * 2001}, "comment"),
        ({"rating": "down", "comment": 5}, "comment"),
        ({"rating": "down", "comment": "red \x1b[31mtext"}, "comment"),
        ({"rating": "down", "comment": "a\u202eb"}, "comment"),
    ],
)
def test_bad_feedback_is_a_400_naming_the_field(client, account_a, owner_a, body, field):
    answer = _turns(account_a, user=owner_a)[0]
    client.force_login(owner_a)
    response = _post(client, answer.pk, body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["field"] == field and error["code"] in ("invalid_rating", "invalid_comment")
    assert _count(account_a) == 0


def test_only_answers_of_ones_own_conversations_get_feedback(client, account_a, account_b, owner_a, owner_b):
    mine = _turns(account_a, user=owner_a)[0]
    colleague = add_member(account_a, role=Role.ADMIN)
    theirs = _turns(account_a, user=colleague)[0]
    other_account = _turns(account_b, user=owner_b)[0]
    with account_context(account_a):
        question = Message.objects.for_account(account_a).get(conversation=mine.conversation, role="user")
    client.force_login(owner_a)
    for message_id in (theirs.pk, other_account.pk, question.pk, 999_999_999, 2**63):
        response = _post(client, message_id, {"rating": "down"})
        assert response.status_code == 404, (message_id, response.content)
        assert response.json()["error"]["code"] == "not_found"
    # Account B's owner cannot rate account A's answer either, and sees none of A's feedback.
    assert _post(client, mine.pk, {"rating": "up"}).status_code == 201
    client.force_login(owner_b)
    assert _post(client, mine.pk, {"rating": "down"}).status_code == 404
    listed = client.get("/api/v1/feedback/")
    assert listed.status_code == 200 and listed.json()["results"] == []
    assert _count(account_a) == 1 and _count(account_b) == 0


def test_a_key_rates_its_own_conversations_answers_not_the_persons(client, account_a, owner_a):
    raw = make_api_key(account_a)
    with account_context(account_a):
        key = ApiKey.objects.for_account(account_a).get()
    keys_answer = _turns(account_a, api_key=key)[0]
    persons_answer = _turns(account_a, user=owner_a)[0]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert _post(client, keys_answer.pk, {"rating": "down", "comment": "wrong"}, **auth).status_code == 201
    assert _post(client, persons_answer.pk, {"rating": "down"}, **auth).status_code == 404
    with account_context(account_a):
        stored = MessageFeedback.objects.for_account(account_a).get()
    assert stored.api_key_id == key.pk and stored.user_id is None
    # A key may not read the team's feedback.
    assert client.get("/api/v1/feedback/", **auth).status_code == 403


@pytest.mark.parametrize("role, status", [(Role.OWNER, 200), (Role.ADMIN, 200), (Role.MEMBER, 403), (Role.VIEWER, 403)])
def test_feedback_list_is_for_owners_and_admins(client, account_a, owner_a, handbook, role, status):
    person = owner_a if role == Role.OWNER else add_member(account_a, role=role)
    citation = {**CITATION, "document_id": handbook.pk}
    answer = _turns(account_a, user=person, citation=citation)[0]
    client.force_login(person)
    assert _post(client, answer.pk, {"rating": "down", "comment": "Too short"}).status_code == 201
    response = client.get("/api/v1/feedback/")
    assert response.status_code == status, response.content
    if status == 200:
        [row] = response.json()["results"]
        assert row == {
            "message_id": answer.pk,
            "rating": "down",
            "comment": "Too short",
            "question": "How much holiday?",
            "answer": "Twenty-eight days [Document 1].",
            "citations": [citation],
            "created_at": row["created_at"],
        }
    else:
        assert response.json()["error"]["code"] == "forbidden"


def test_feedback_list_pages_newest_first(client, account_a, owner_a, django_assert_max_num_queries):
    answers = _turns(account_a, user=owner_a, turns=[(f"Question {i}?", f"Answer {i}.") for i in range(5)])
    client.force_login(owner_a)
    for i, answer in enumerate(answers):
        assert _post(client, answer.pk, {"rating": "down" if i % 2 else "up"}).status_code == 201
    seen, url = [], "/api/v1/feedback/?page_size=2"
    while url:
        with django_assert_max_num_queries(12):
            body = client.get(url).json()
        seen += [row["question"] for row in body["results"]]
        url = body["next"]
    assert seen == [f"Question {i}?" for i in reversed(range(5))]
    downs = client.get("/api/v1/feedback/?rating=down").json()["results"]
    assert [row["question"] for row in downs] == ["Question 3?", "Question 1?"]
    assert client.get("/api/v1/feedback/?rating=sideways").status_code == 400
    assert client.get("/api/v1/feedback/?cursor=%%%").status_code == 400


def test_regression_cases_are_the_down_voted_questions_with_their_previous_turn(
    client, account_a, account_b, owner_a, owner_b
):
    first, second = _turns(
        account_a,
        user=owner_a,
        turns=[("What is Groundwork?", "A tool [Document 1]."), ("And its price?", "Sydney is the capital.")],
    )
    other = _turns(account_b, user=owner_b, turns=[("Beta question?", "Beta answer.")])[0]
    client.force_login(owner_a)
    assert _post(client, first.pk, {"rating": "up"}).status_code == 201
    assert _post(client, second.pk, {"rating": "down", "comment": "Made up"}).status_code == 201
    client.force_login(owner_b)
    assert _post(client, other.pk, {"rating": "down"}).status_code == 201

    with account_context(account_a):
        [case] = selectors.feedback_regression_cases(account=account_a)
    assert case == {
        "account_id": account_a.pk,
        "conversation_id": second.conversation_id,
        "message_id": second.pk,
        "question": "And its price?",
        "previous_question": "What is Groundwork?",
        "previous_answer": "A tool [Document 1].",
        "answer": "Sydney is the capital.",
        "citations": [CITATION],
        "comment": "Made up",
    }
    with account_context(account_b):
        [b_case] = selectors.feedback_regression_cases(account=account_b)
    assert b_case["question"] == "Beta question?" and b_case["previous_question"] == ""
    every = selectors.feedback_regression_cases()  # the bench: every account's
    assert [c["message_id"] for c in every] == [second.pk, other.pk]


def test_feedback_selectors_are_per_account(account_a, account_b, owner_a, owner_b):
    answer = _turns(account_a, user=owner_a)[0]
    with account_context(account_a):
        MessageFeedback.objects.for_account(account_a).create(
            account=account_a, message=answer, user=owner_a, rating="down"
        )
    with account_context(account_b):
        assert list(selectors.feedback_list(account=account_b)) == []
        assert selectors.feedback_regression_cases(account=account_b) == []
        assert selectors.feedback_of_principal(account=account_b, messages=[answer], user=owner_a) == {}
    with account_context(account_a):
        assert [f.message_id for f in selectors.feedback_list(account=account_a)] == [answer.pk]
        assert list(selectors.feedback_of_principal(account=account_a, messages=[answer], user=owner_a)) == [answer.pk]
