"""The Feedback page (owners and admins) and the chat page's thumbs: what is shown, escaped,
to whom, and another account's feedback never."""

from __future__ import annotations

import pytest

from accounts.models import Role
from accounts.tests.factories import add_member
from chat.models import MessageFeedback
from chat.tests.test_feedback import _turns
from core.tenancy import account_context


def _feedback(account, answer, user, rating="down", comment=""):
    with account_context(account):
        return MessageFeedback.objects.for_account(account).create(
            account=account, message=answer, user=user, rating=rating, comment=comment
        )


def test_the_owner_sees_feedback_with_question_answer_and_comment_escaped(client, account_a, owner_a):
    member = add_member(account_a, role=Role.MEMBER)
    answer = _turns(account_a, user=member, turns=[("Is <b>this</b> right?", "No <script>alert(1)</script>.")])[0]
    _feedback(account_a, answer, member, comment="Wrong <img src=x onerror=alert(2)>")
    client.force_login(owner_a)
    html = client.get("/chat/feedback/").content.decode()
    assert "Is &lt;b&gt;this&lt;/b&gt; right?" in html
    assert "No &lt;script&gt;alert(1)&lt;/script&gt;." in html
    assert "Wrong &lt;img src=x onerror=alert(2)&gt;" in html and "<img src=x" not in html
    assert member.email in html and 'data-rating="down"' in html
    assert 'href="/chat/feedback/"' in client.get("/chat/").content.decode()  # the nav links it
    assert "No feedback of this kind" in client.get("/chat/feedback/?rating=up").content.decode()


@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER])
def test_members_and_viewers_may_not_open_the_feedback_page(client, account_a, role):
    client.force_login(add_member(account_a, role=role))
    assert client.get("/chat/feedback/").status_code == 403
    assert 'href="/chat/feedback/"' not in client.get("/chat/").content.decode()


def test_another_accounts_feedback_is_not_listed(client, account_a, account_b, owner_a, owner_b):
    answer = _turns(account_a, user=owner_a, turns=[("Acme secret question?", "Acme answer.")])[0]
    _feedback(account_a, answer, owner_a, comment="acme comment")
    client.force_login(owner_b)
    html = client.get("/chat/feedback/").content.decode()
    assert "Acme secret question" not in html and "acme comment" not in html and "No feedback yet" in html


def test_a_reopened_conversation_shows_ones_own_rating(client, account_a, owner_a):
    answer = _turns(account_a, user=owner_a)[0]
    _feedback(account_a, answer, owner_a, rating="up", comment='Good "one"')
    client.force_login(owner_a)
    html = client.get(f"/chat/{answer.conversation_id}/").content.decode()
    assert (
        f'data-feedback-url="/api/v1/messages/{answer.pk}/feedback/" data-rating="up" '
        'data-comment="Good &quot;one&quot;"'
    ) in html


def test_support_staff_read_every_accounts_feedback_and_change_none(client, account_a, account_b, owner_a, owner_b):
    from accounts.tests.factories import make_user

    _feedback(account_a, _turns(account_a, user=owner_a)[0], owner_a, comment="alpha comment")
    beta = _feedback(account_b, _turns(account_b, user=owner_b)[0], owner_b, comment="beta comment")
    client.force_login(make_user("support@groundwork.test", is_staff=True, is_superuser=True))
    listing = client.get("/admin/chat/messagefeedback/").content.decode()
    assert "alpha comment" in listing and "beta comment" in listing
    assert client.get("/admin/chat/messagefeedback/add/").status_code == 403
    client.post(f"/admin/chat/messagefeedback/{beta.pk}/delete/", {"post": "yes"})
    with account_context(account_b):
        assert MessageFeedback.objects.for_account(account_b).filter(pk=beta.pk).exists()
