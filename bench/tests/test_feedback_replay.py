"""`python -m bench answer_eval --feedback`: every account's down-voted answers become the
questions it replays, each after the question before it in its conversation, in its own
account; up-voted answers and empty questions are not replayed."""

import pytest

from bench.answer_eval import feedback_questions
from chat.tests.test_feedback import _post, _turns

pytestmark = pytest.mark.django_db


def test_the_replay_asks_each_down_voted_question_in_its_own_account(client, account_a, account_b, owner_a, owner_b):
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

    replayed = sorted(feedback_questions(), key=lambda item: item["account_id"])
    assert [(q["account_id"], q["question"], q["first"], q["voted_answer"], q["comment"]) for q in replayed] == [
        (account_a.pk, "And its price?", "What is Groundwork?", "Sydney is the capital.", "Made up"),
        (account_b.pk, "Beta question?", None, "Beta answer.", ""),
    ]
    assert all(q["group"] == "feedback" and q["id"].startswith("feedback-") for q in replayed)
