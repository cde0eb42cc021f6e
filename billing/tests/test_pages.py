"""The credits page: balance, the daily usage chart (SVG with a table fallback), the
ledger with filters and pages, and nothing of another account's."""
import datetime as dt

from django.utils import timezone

from core.tenancy import account_context
from accounts.tests.factories import add_member
from billing.dashboard import usage_chart
from billing.services import credits_debit, credits_grant


def _spend(account, *, embedding=0, chat=0, key="k"):
    with account_context(account):
        credits_grant(account=account, amount=100_000, reason="tests", key=f"grant:{key}")
        if embedding:
            credits_debit(account=account, tokens=embedding, key=f"emb:{key}", kind="embedding",
                          reference="document:7:rev1", model="all-minilm-l6-v2")
        if chat:
            credits_debit(account=account, tokens=chat, key=f"chat:{key}", kind="chat", reference="message:3")


def test_empty_credits_page_tells_what_spends_credits(client_a):
    page = client_a.get("/credits/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "No usage in the last 30 days" in html and "Upload a document" in html
    assert 'id="credits-balance"' in html


def test_credits_page_shows_balance_chart_and_ledger(client_a, account_a, django_assert_max_num_queries):
    _spend(account_a, embedding=1234, chat=56)
    with django_assert_max_num_queries(18):
        html = client_a.get("/credits/").content.decode()
    assert '<svg class="chart"' in html and 'role="img"' in html
    assert "<title id=\"chart-title\">" in html and "1290 credits spent" in html.replace(",", "")
    assert 'class="bar-embedding"' in html and 'class="bar-chat"' in html
    assert 'id="usage-table"' in html  # the accessible fallback
    assert ">-1234<" in html and ">-56<" in html
    assert 'href="/documents/7/"' in html  # a document's charge links to its page
    assert html.count('data-kind="hold"') == 0  # bookkeeping hidden by default


def test_ledger_filters_by_kind_and_pages(client_a, account_a):
    for i in range(30):
        _spend(account_a, chat=10 + i, key=str(i))
    chat_only = client_a.get("/credits/?kind=chat").content.decode()
    assert chat_only.count('data-kind="chat"') == 25 and 'data-kind="grant"' not in chat_only
    assert "Page 1 of 2" in chat_only and "kind=chat" in chat_only
    second = client_a.get("/credits/?kind=chat&page=2").content.decode()
    assert second.count('data-kind="chat"') == 5
    assert client_a.get("/credits/?kind=nonsense&page=999").status_code == 200


def test_another_accounts_usage_is_not_shown(client, account_a, account_b, owner_b):
    _spend(account_a, embedding=4321)
    client.force_login(owner_b)
    html = client.get("/credits/").content.decode()
    assert "4321" not in html and "No usage in the last 30 days" in html


def test_members_see_credits(client, account_a):
    client.force_login(add_member(account_a))
    assert client.get("/credits/").status_code == 200


def test_anonymous_is_sent_to_login(client, db):
    assert client.get("/credits/")["Location"].startswith("/login/")


def test_usage_chart_has_every_day_and_totals(account_a):
    _spend(account_a, embedding=300, chat=20)
    with account_context(account_a):
        chart = usage_chart(account=account_a, days=30)
    assert len(chart.days) == 30 and chart.days[-1].day == timezone.localdate()
    assert chart.days[0].day == timezone.localdate() - dt.timedelta(days=29)
    assert chart.totals == {"embedding": 300, "chat": 20} and chart.total == 320
    today = chart.days[-1]
    assert [s["kind"] for s in today.segments] == ["embedding", "chat"]
    assert chart.max_value >= 320 and chart.ticks[-1]["value"] == chart.max_value
    assert all(s["height"] >= 1 for s in today.segments)
