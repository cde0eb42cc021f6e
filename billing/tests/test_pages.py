"""The credits page: balance, the daily usage chart (SVG with a table fallback), the
ledger with filters and pages, and nothing of another account's."""

import datetime as dt
import re

from django.utils import timezone

from accounts.tests.factories import add_member
from billing.dashboard import usage_chart
from billing.selectors import balance_get
from billing.services import credits_debit, credits_grant, credits_hold, hold_settle
from core.tenancy import account_context


def _spend(account, *, embedding=0, chat=0, key="k"):
    with account_context(account):
        credits_grant(account=account, amount=100_000, reason="tests", key=f"grant:{key}")
        if embedding:
            credits_debit(
                account=account,
                tokens=embedding,
                key=f"emb:{key}",
                kind="embedding",
                reference="document:7:rev1",
                model="all-minilm-l6-v2",
            )
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
    assert '<title id="chart-title">' in html and "1290 credits spent" in html.replace(",", "")
    assert 'class="bar-embedding"' in html and 'class="bar-chat"' in html
    assert 'id="usage-table"' in html  # the accessible fallback
    assert ">-1,234<" in html and ">-56<" in html
    # A charge for a document this reader cannot open (here: no document 7 exists) names none
    # and links nowhere; one they can open links to its page (documents/tests/test_collections.py).
    assert "a document you cannot open" in html and 'href="/documents/7/"' not in html
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


# A ledger a person can read.

ROW = re.compile(
    r'<tr data-kind="(?P<kind>[a-z_]+)".*?data-delta="(?P<delta>-?\d+)".*?data-balance="(?P<balance>-?\d+)"', re.S
)
HELD_ROW = re.compile(r'<tr data-kind="held".*?data-balance="(?P<balance>-?\d+)"', re.S)


def _rows(html):
    return [(m["kind"], int(m["delta"]), int(m["balance"])) for m in ROW.finditer(html)]


def _assert_running(rows):
    """Newest first: each row's balance is the next (older) row's plus its own change."""
    for newer, older in zip(rows, rows[1:]):
        assert newer[2] == older[2] + newer[1], (newer, older)


def _grant_chat_embed(account):
    with account_context(account):
        credits_grant(account=account, amount=1_234_567, reason="Annual plan, invoice 42", key="grant:annual")
        hold = credits_hold(account=account, amount=4_000, key="chat:1", reference="message:9")
        # Embedding charged while the chat hold is open: its stored balance_after is 4,000 low.
        credits_debit(account=account, tokens=2_345, key="emb:1", kind="embedding", reference="document:7:rev1")
        hold_settle(hold=hold, used_tokens=1_500, reference="message:9")
        credits_debit(account=account, tokens=1_111, key="emb:2", kind="embedding", reference="document:8:rev1")


def test_ledger_running_balance_never_jumps_and_ends_at_the_balance(client_a, account_a):
    _grant_chat_embed(account_a)
    html = client_a.get("/credits/").content.decode()
    rows = _rows(html)
    assert [k for k, _, _ in rows[:4]] == ["embedding", "chat", "embedding", "grant"]
    assert "hold" not in {k for k, _, _ in rows} and "hold_release" not in {k for k, _, _ in rows}
    _assert_running(rows)
    with account_context(account_a):
        final = balance_get(account=account_a)
    assert rows[0][2] == final
    assert not HELD_ROW.search(html)  # nothing held once the answer is settled
    # Monotone over spending: after the grant, every row only goes down.
    after_grant = [b for _, _, b in rows[:4]]
    assert after_grant == sorted(after_grant)


def test_ledger_with_holds_shows_them_with_their_own_running_balance(client_a, account_a):
    _grant_chat_embed(account_a)
    rows = _rows(client_a.get("/credits/?holds=1").content.decode())
    kinds = [k for k, _, _ in rows]
    assert "hold" in kinds and "hold_release" in kinds
    _assert_running(rows)


def test_open_hold_is_a_held_line_above_the_settled_entries(client_a, account_a):
    _grant_chat_embed(account_a)
    with account_context(account_a):
        credits_hold(account=account_a, amount=3_000, key="chat:2", reference="message:10")
        credits_debit(account=account_a, tokens=200, key="emb:3", kind="embedding", reference="document:9:rev1")
        final = balance_get(account=account_a)
    html = client_a.get("/credits/").content.decode()
    held = HELD_ROW.search(html)
    assert held and int(held["balance"]) == final
    rows = _rows(html)
    assert rows[0] == ("held", -3_000, final) and rows[1][0] == "embedding"
    _assert_running(rows)  # the settled balance less what is held is the balance
    assert 'id="credits-held"' in html and "3,000 more held" in html


def test_running_balance_counts_every_kind_when_filtered(client_a, account_a):
    _grant_chat_embed(account_a)
    rows = _rows(client_a.get("/credits/?kind=embedding").content.decode())
    with account_context(account_a):
        final = balance_get(account=account_a)
    assert [k for k, _, _ in rows] == ["embedding", "embedding"] and rows[0][2] == final


def test_grant_shows_its_reason_and_numbers_have_separators(client_a, account_a):
    _grant_chat_embed(account_a)
    html = client_a.get("/credits/").content.decode()
    grant = re.search(r'<tr data-kind="grant">.*?</tr>', html, re.S).group(0)
    assert "Annual plan, invoice 42" in grant and "+1,234,567" in grant
    assert ">-2,345<" in html and ">-1,500<" in html and ">1,500<" in html  # change and tokens
    balance = re.search(r'id="credits-balance">([^<]+)<', html).group(1)
    with account_context(account_a):
        assert balance == f"{balance_get(account=account_a):,}"
    assert ">3,456<" in re.search(r'id="usage-table".*?</table>', html, re.S).group(0)  # 2,345 + 1,111 today
