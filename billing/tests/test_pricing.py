"""One price, one seam: billing.pricing turns every usage into credits,
and a price other than 1:1, set in CREDITS_PER_1K_TOKENS and nowhere else, changes every
surface's charge, hold, estimate and preflight. Each surface is run at the default price and
again at another, against the fake provider on loopback; the provider-reported tokens stay
what they were, the credits follow the price."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.tests.factories import make_account, make_api_key
from billing import pricing
from billing.models import CreditLedgerEntry
from billing.selectors import balance_get
from billing.services import credits_debit, credits_grant
from core.tenancy import account_context
from documents.models import Document

ONE_TO_ONE = {"embedding": 1000, "chat": 1000}
EMBEDDING_TWICE = {"embedding": 2000, "chat": 1000}
PRICIER = {"embedding": 2000, "chat": 3000}
TEXT = (
    "# Onboarding handbook\n\n"
    + "New starters get a laptop and a badge on day one. " * 40
    + "\n\n## Holidays\n\n"
    + "Everyone has twenty-eight days of paid holiday a year. " * 40
).encode()


def _balance(account) -> int:
    with account_context(account):
        return balance_get(account=account)


def _entries(account, **filters):
    with account_context(account):
        return list(CreditLedgerEntry.objects.for_account(account).filter(**filters).order_by("pk"))


def test_the_rule(settings):
    settings.CREDITS_PER_1K_TOKENS = ONE_TO_ONE
    assert pricing.credits_for(kind="embedding", tokens=1234) == 1234
    assert pricing.credits_for(kind="chat", tokens=0) == pricing.MIN_CREDITS_PER_CALL == 1
    assert pricing.credits_for(kind="vision", tokens=300) == 300  # priced as chat
    settings.CREDITS_PER_1K_TOKENS = {"embedding": 2000, "chat": 1500, "chat:big-model": 4000, "vision": 500}
    assert pricing.credits_for(kind="embedding", model="any", tokens=10) == 20
    assert pricing.credits_for(kind="chat", tokens=3) == 5  # 4.5, rounded up
    assert pricing.credits_for(kind="chat", model="big-model", tokens=3) == 12
    assert pricing.credits_for(kind="vision", model="big-model", tokens=10) == 5
    assert pricing.credits_at_most(kind="chat", tokens=10) == 40  # whichever model answers
    assert pricing.ledger_kind("vision") == "chat"
    settings.CREDITS_PER_1K_TOKENS = {"chat": 1000}
    with pytest.raises(ImproperlyConfigured, match="embedding"):
        pricing.credits_for(kind="embedding", tokens=1)
    settings.CREDITS_PER_1K_TOKENS = {"embedding": "2", "chat": 1000}
    with pytest.raises(ImproperlyConfigured, match="whole number"):
        pricing.credits_for(kind="embedding", tokens=1)


def test_a_debit_records_tokens_and_credits_apart(account_a, settings):
    settings.CREDITS_PER_1K_TOKENS = PRICIER
    with account_context(account_a):
        entry = credits_debit(account=account_a, tokens=100, key="q", kind="chat")
        assert (entry.tokens, entry.delta) == (100, -300)
        assert credits_debit(account=account_a, tokens=100, key="q", kind="chat").pk == entry.pk  # a retry
        assert balance_get(account=account_a) == 10_000 - 300


@pytest.fixture
def upload(client, queue, run_jobs, django_capture_on_commit_callbacks):
    """Upload TEXT over REST with an API key of `account` (the key's member pays), fire the
    request's on-commit hooks (the queueing), run the queue, return the document."""

    def go(account, name="handbook.md"):
        key = make_api_key(account)
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(
                "/api/v1/documents/",
                {"file": SimpleUploadedFile(name, TEXT, content_type="text/markdown")},
                HTTP_AUTHORIZATION=f"Bearer {key}",
            )
        assert response.status_code == 202, response.content
        run_jobs()
        return _document(account, response.json()["id"])

    return go


def _document(account, document_id) -> Document:
    with account_context(account):
        return Document.objects.for_account(account).get(pk=document_id)


def test_an_upload_is_estimated_checked_and_charged_at_the_price(upload, account_a, account_b, settings, fake_llm):
    settings.CREDITS_PER_1K_TOKENS = ONE_TO_ONE
    cheap = upload(account_a)
    settings.CREDITS_PER_1K_TOKENS = EMBEDDING_TWICE
    dear = upload(account_b)
    assert cheap.status == dear.status == "ready"
    assert dear.credits_estimate == 2 * cheap.credits_estimate > 0
    [cheap_charge] = _entries(account_a, kind="embedding")
    [dear_charge] = _entries(account_b, kind="embedding")
    assert dear_charge.tokens == cheap_charge.tokens == dear.embedding_tokens > 0
    assert dear_charge.delta == 2 * cheap_charge.delta
    assert dear.credits_charged == -dear_charge.delta

    # The preflight: enough for the document at 1:1, not at the price: refused before embedding.
    short = make_account("Short")
    with account_context(short):
        credits_debit(
            account=short, tokens=balance_get(account=short) - (dear.credits_estimate - 1), key="drain", kind="chat"
        )
    assert cheap.credits_estimate <= _balance(short) < dear.credits_estimate
    fake_llm.clear()
    refused = upload(short)
    assert refused.status == "failed" and refused.error_code == "insufficient_credits"
    assert f"{dear.credits_estimate:,} credits" in refused.error
    assert _entries(short, kind="embedding") == [] and not fake_llm.requests_to("/v1/embeddings")


def test_a_search_is_charged_at_the_price(client, account_a, settings, fake_llm):
    key = make_api_key(account_a)

    def search():
        response = client.post(
            "/api/v1/search/",
            {"query": "how many holiday days"},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
        assert response.status_code == 200, response.content
        return _entries(account_a, kind="embedding")[-1]

    settings.CREDITS_PER_1K_TOKENS = ONE_TO_ONE
    cheap = search()
    settings.CREDITS_PER_1K_TOKENS = EMBEDDING_TWICE
    dear = search()
    assert dear.tokens == cheap.tokens > 0 and dear.delta == 2 * cheap.delta


def test_a_chat_turn_holds_and_settles_at_the_price(client, account_a, settings, fake_llm, upload_and_ingest):
    upload_and_ingest(account_a, "handbook.md", TEXT, "text/markdown")
    key = make_api_key(account_a)
    with account_context(account_a):
        credits_grant(account=account_a, amount=100_000, reason="room for three turns")

    def turn(prices) -> dict:
        settings.CREDITS_PER_1K_TOKENS = prices
        before = _entries(account_a)[-1].pk
        response = client.post(
            "/api/v1/chat/",
            {"message": "How much holiday do we get?"},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
        assert response.status_code == 200, response.content
        written = {e.kind: e for e in _entries(account_a, pk__gt=before) if e.kind in ("hold", "embedding", "chat")}
        assert response.json()["credits_remaining"] == _balance(account_a)
        return {"held": -written["hold"].delta, "query": written["embedding"], "answer": written["chat"]}

    cheap, embedding_twice, dear = turn(ONE_TO_ONE), turn(EMBEDDING_TWICE), turn(PRICIER)
    # The hold: the answer's worst case at the chat price plus the query's at the embedding price.
    query_held = embedding_twice["held"] - cheap["held"]
    answer_held = cheap["held"] - query_held
    assert query_held > 0 and answer_held > 0
    assert dear["held"] == 3 * answer_held + 2 * query_held
    # The query embedding drawn from the hold, and the settle: the same tokens, priced.
    assert dear["query"].tokens == cheap["query"].tokens and dear["query"].delta == 2 * cheap["query"].delta
    assert dear["answer"].tokens == cheap["answer"].tokens > 0
    assert dear["answer"].delta == 3 * cheap["answer"].delta
    with account_context(account_a):
        from chat.models import Message

        answer = Message.objects.for_account(account_a).filter(role="assistant").order_by("pk").last()
    assert answer.credits_charged == -dear["answer"].delta


def test_the_embedding_migration_is_estimated_and_charged_at_the_price(
    account_a, owner_a, settings, fake_llm, upload_and_ingest, django_capture_on_commit_callbacks
):
    from retrieval import services as retrieval_services
    from retrieval.embedding_models import migration_step, model_change

    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = "model-a", 384
    fake_llm.backend.model_dimensions = {"model-b": 256}
    document = upload_and_ingest(account_a, "handbook.md", TEXT, "text/markdown")
    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = "model-b", 256
    with account_context(account_a):
        settings.CREDITS_PER_1K_TOKENS = ONE_TO_ONE
        assert model_change(account=account_a).credits_estimate == document.embedding_tokens
        # Priced for the target model only: the estimate and the charge follow.
        settings.CREDITS_PER_1K_TOKENS = {**ONE_TO_ONE, "embedding:model-b": 2000}
        assert model_change(account=account_a).credits_estimate == 2 * document.embedding_tokens
        with django_capture_on_commit_callbacks(execute=False):
            run = retrieval_services.embedding_migration_start(account=account_a, actor=owner_a)
    while migration_step(account_id=account_a.pk, run_id=run.pk):
        pass
    charges = _entries(account_a, kind="embedding", idempotency_key__startswith="embedding-migration:")
    assert charges and all(e.delta == -2 * e.tokens for e in charges)


def test_the_pages_say_the_price(client_a, settings):
    settings.CREDITS_PER_1K_TOKENS = ONE_TO_ONE
    assert "1 credit = 1 model token" in client_a.get("/credits/").content.decode()
    settings.CREDITS_PER_1K_TOKENS = PRICIER
    page = client_a.get("/credits/").content.decode()
    assert "Credits per 1,000 model tokens: chat 3,000, embedding 2,000" in page
