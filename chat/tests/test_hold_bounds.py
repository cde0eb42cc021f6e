"""A hold counts the prompt as the model that charges counts it. Found from outside: chat
holds undercounted, so budgets and the balance could be passed. The hold counted the prompt
with the embedding model's WordPiece tokenizer (a word over 100 characters is one [UNK]);
the chat model charged its own count.
`POST /v1/chat/completions` with a system message of 75 random 110-character words held
1,475 credits and used 6,904: a day budget with 2,500 left was passed by 4,413, and a
10,000-credit team's second call was written off as `shortfall`.

The fake model here counts a prompt's UTF-8 bytes as its tokens (`prompt_counting="bytes"`):
as many as any byte-level tokenizer can make of a text, the costliest model a provider could
run. Every turn must then be charged at most its hold, on every surface, with no shortfall.
"""

from __future__ import annotations

import json
import random
import string

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from accounts.tests.factories import make_api_key
from billing.budgets import budget_set
from billing.models import CreditHold, CreditLedgerEntry
from billing.selectors import balance_get
from billing.services import credits_grant
from core.tenancy import account_context


def _review_words(seed: int = 22) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(string.ascii_letters + string.digits) for _ in range(110)) for _ in range(75))


TEXTS = {
    "random words": _review_words(),
    "non-Latin": "Привет, как дела? Сколько дней отпуска? " * 60 + "休日は何日ありますか？" * 80,
    "emoji": "😀🎉🚀👩‍👩‍👧‍👦 " * 200,
    "arabic": "كم يوما من العطلة لدينا؟ " * 150,
}


@pytest.fixture
def costly_model(fake_llm, settings):
    settings.CHAT_RATE_PER_USER = settings.CHAT_RATE_PER_ACCOUNT = "1000/min"
    fake_llm.backend.prompt_counting = "bytes"
    fake_llm.answer = "Twenty-eight days [Document 1]."
    return fake_llm


@pytest.fixture
def key_a(account_a):
    return make_api_key(account_a)


def _auth(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def assert_no_turn_passed_its_hold(account):
    """Every chat hold was charged at most its amount, nothing was written off, the balance
    never went below zero."""
    with account_context(account):
        assert not CreditLedgerEntry.objects.for_account(account).filter(shortfall__gt=0).exists()
        for hold in CreditHold.objects.for_account(account).filter(key__startswith="chat:"):
            charged = -sum(
                e.delta
                for e in CreditLedgerEntry.objects.for_account(account).filter(
                    idempotency_key__startswith=hold.key, kind__in=("chat", "embedding")
                )
            )
            assert charged <= hold.amount, (hold.key, charged, hold.amount)
        assert balance_get(account=account) >= 0


def _v1(client, key, system, question="How much holiday do we get?"):
    body = {
        "model": "groundwork",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
    }
    return client.post("/v1/chat/completions", json.dumps(body), content_type="application/json", **_auth(key))


def test_the_reviews_request_is_refused_or_paid_in_full_never_written_off(
    client, account_a, key_a, handbook, costly_model
):
    """On a 10,000-credit team the review's second call was charged 3,325 of 6,665 and the rest
    written off. Now each call is answered and paid in full within its hold, or refused
    before the model is called (402, nothing charged)."""
    outcomes = []
    for _ in range(3):
        before = balance_get(account=account_a)
        response = _v1(client, key_a, TEXTS["random words"])
        outcomes.append(response.status_code)
        if response.status_code == 402:
            assert response.json()["error"]["code"] == "insufficient_credits"
            assert balance_get(account=account_a) == before
        else:
            assert response.status_code == 200, response.content
            assert response.json()["usage"]["prompt_tokens"] > 8_000  # the costly model's own count
    assert outcomes[0] == 200 and 402 in outcomes  # the first is paid; the balance runs out after
    assert_no_turn_passed_its_hold(account_a)


def test_a_day_budget_is_never_passed(client, account_a, key_a, handbook, costly_model):
    """The review: a day budget with 2,500 left was passed by 4,413."""
    from accounts.models import ApiKey

    with account_context(account_a):
        credits_grant(account=account_a, amount=100_000, reason="test", key="more")
        key = ApiKey.objects.for_account(account_a).get()
        budget_set(account=account_a, actor=account_a.test_owner, period="day", limit=2_500, api_key_id=key.pk)
    response = _v1(client, key_a, TEXTS["random words"])
    assert response.status_code == 402 and response.json()["error"]["code"] == "budget_exceeded"
    for _ in range(3):  # ordinary questions until the budget is used up: each within it
        _v1(client, key_a, "Be brief.")
    with account_context(account_a):
        spent = -sum(
            e.delta
            for e in CreditLedgerEntry.objects.for_account(account_a).filter(
                spent_by_api_key=key, kind__in=("chat", "embedding")
            )
        )
    assert 0 < spent <= 2_500
    assert_no_turn_passed_its_hold(account_a)


@pytest.mark.parametrize("name", list(TEXTS))
def test_long_costly_questions_stay_within_their_holds_on_rest_and_v1(
    client, account_a, key_a, handbook, costly_model, name
):
    with account_context(account_a):
        credits_grant(account=account_a, amount=200_000, reason="test", key="more")
    text = TEXTS[name][:3_900]  # a REST question is at most 4,000 characters
    rest = client.post("/api/v1/chat/", {"message": text}, content_type="application/json", **_auth(key_a))
    assert rest.status_code == 200, rest.content
    assert _v1(client, key_a, TEXTS[name], question=text).status_code == 200
    stream = client.post("/api/v1/chat/?stream=1", {"message": text}, content_type="application/json", **_auth(key_a))
    assert stream.status_code == 200 and b"chat.done" in b"".join(stream.streaming_content)
    assert_no_turn_passed_its_hold(account_a)


def test_a_small_balance_gets_a_shorter_answer_not_a_written_off_one(client, account_a, key_a, handbook, costly_model):
    """A balance that covers the question but not the worst case holds what it has: the turn
    reads fewer passages and its answer may stop at the hold (finish_reason "length")."""
    with account_context(account_a):
        left = balance_get(account=account_a)
        from billing.services import credits_debit

        credits_debit(account=account_a, tokens=left - 1_500, key="drain", kind="chat")
    costly_model.answer = " ".join(f"word{i}" for i in range(3_000))
    response = _v1(client, key_a, "Be brief.")
    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["finish_reason"] == "length"
    assert_no_turn_passed_its_hold(account_a)


@pytest.mark.slow
@hypothesis_settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(system=st.text(min_size=0, max_size=3_000), question=st.text(min_size=1, max_size=1_000))
def test_the_hold_is_never_below_the_charge(client, account_a, key_a, handbook, costly_model, system, question):
    """Property: whatever text a caller sends (any Unicode, any length the API takes), the turn
    is refused or charged at most its hold."""
    if not question.strip() or "\x00" in system + question:
        return
    with account_context(account_a):
        credits_grant(account=account_a, amount=20_000, reason="test", key=f"top-up-{len(system)}-{len(question)}")
    response = _v1(client, key_a, system, question=question)
    assert response.status_code in (200, 400, 402), response.content
    assert_no_turn_passed_its_hold(account_a)


def test_a_balance_that_cannot_pay_for_one_passage_is_refused_not_answered_without_it(
    client, account_a, key_a, ingest_text, costly_model
):
    """Held down to the least a turn needs, a turn whose best passage does not fit is refused
    (402, what it needs said), not answered as if the documents had nothing."""
    from billing.services import credits_debit

    ingest_text(account_a, "long.md", "# Holidays\n\n" + "Everyone has twenty-eight days of paid holiday. " * 16)
    with account_context(account_a):
        left = balance_get(account=account_a)
        # Enough for the question's prompt and a short answer, not for an ~800-byte passage.
        credits_debit(account=account_a, tokens=left - 1_100, key="drain", kind="chat")
        before = balance_get(account=account_a)
    response = client.post(
        "/api/v1/chat/", {"message": "How much holiday do we get?"}, content_type="application/json", **_auth(key_a)
    )
    assert response.status_code == 402, response.content
    assert response.json()["error"]["code"] == "insufficient_credits"
    with account_context(account_a):
        assert before - balance_get(account=account_a) < 100  # at most the query's embedding
    assert_no_turn_passed_its_hold(account_a)


def test_the_query_embedding_is_held_as_the_accounts_embedding_model_counts_it(settings):
    """With the bundled e5 (the default), a long question's embedding was held as MiniLM counts
    it, cut at 256 tokens, and drawn as e5 counts it ("query: " and every token): 1,521
    credits drawn from a hold that had room for far fewer, and the turn refused after it."""
    from chat.holds import retrieval_worst_case
    from chat.router import LOOKUP
    from chat.turn import profile
    from llm.e5 import E5Embedder

    settings.LLM_BUNDLED = True
    settings.CREDITS_PER_1K_TOKENS = {"chat": 1000, "embedding": 1000}
    question = "Wie viele Urlaubstage haben wir, und wer genehmigt den Antrag im Dezember? " * 40
    drawn = E5Embedder(threads=1).count_tokens("query: " + question)
    assert drawn > 512
    held = retrieval_worst_case(question, [], LOOKUP, profile(), embedding_model="multilingual-e5-small")
    assert held == drawn


def test_a_turn_refused_once_its_passages_are_known_charges_nothing_and_says_the_balance(
    client, account_a, key_a, ingest_text, costly_model
):
    """Held at the least a turn needs (40 words of a passage), a passage whose 40 words are
    longer than that allowance does not fit: the turn is refused after its query was embedded,
    and that embedding is not charged; the message says the account's balance, not the hold's."""
    from billing.services import credits_debit
    from chat.holds import hold_bounds
    from chat.router import LOOKUP
    from chat.turn import TurnOptions, profile

    # One chunk of 50 Cyrillic words: 40 of them are ~900 bytes, twice the allowance for 40 words.
    ingest_text(account_a, "long-words.md", " ".join(f"отпуск{i:02d}" for i in range(50)))
    question = "Сколько дней отпуск00?"
    least, _ = hold_bounds(question, [], LOOKUP, TurnOptions(), profile(), embedding_model="all-minilm-l6-v2")
    with account_context(account_a):
        credits_debit(account=account_a, tokens=balance_get(account=account_a) - least, key="drain", kind="chat")
        before = list(CreditLedgerEntry.objects.for_account(account_a).order_by("pk").values_list("kind", "delta"))
    embeddings = len(costly_model.requests_to("/v1/embeddings"))
    response = client.post("/api/v1/chat/", {"message": question}, content_type="application/json", **_auth(key_a))
    assert response.status_code == 402, response.content
    assert len(costly_model.requests_to("/v1/embeddings")) == embeddings + 1  # it was embedded
    assert f"the account has {least:,}." in response.json()["error"]["message"]
    with account_context(account_a):
        entries = list(CreditLedgerEntry.objects.for_account(account_a).order_by("pk").values_list("kind", "delta"))
        assert balance_get(account=account_a) == least
    assert [e for e in entries if e not in before] == [("hold", -least), ("hold_release", least)]
    assert not costly_model.requests_to("/v1/chat/completions")
