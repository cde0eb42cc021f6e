"""Prices per model: an operator prices each chat and embedding model and
vision in CREDITS_PER_1K_TOKENS ("<kind>:<model>"), and every hold, debit and estimate shown
to a person prices the model that serves the call. Each test would fail if a caller priced
the model at its kind's 1:1 price instead of the model's 3:1."""

from django.test import override_settings

from accounts.tests.factories import make_api_key
from billing import pricing
from billing.models import CreditLedgerEntry
from billing.services import credits_grant
from core.tenancy import account_context

SERVING = "fake-chat-3x"
PRICED = {"chat": 1000, f"chat:{SERVING}": 3000, "embedding": 500}
FLAT = {"chat": 1000, "embedding": 500}
TEXT = (
    "# Onboarding handbook\n\n"
    + "New starters get a laptop and a badge on day one. " * 40
    + "\n\n## Holidays\n\n"
    + "Everyone has twenty-eight days of paid holiday a year. " * 40
).encode()


def _entries(account, **filters):
    with account_context(account):
        return list(CreditLedgerEntry.objects.for_account(account).filter(**filters).order_by("pk"))


def test_a_hold_covers_the_models_that_serve_not_every_priced_one(settings):
    settings.CREDITS_PER_1K_TOKENS = {**FLAT, "chat:unused-big-model": 9000, f"chat:{SERVING}": 3000}
    settings.CHAT_MODEL, settings.CHAT_FALLBACK_MODEL = "cheap-model", "cheap-model"
    assert pricing.serving_models(pricing.CHAT) == ["cheap-model"]
    assert pricing.credits_at_most(kind="chat", tokens=1000, models=pricing.serving_models("chat")) == 1000
    settings.CHAT_FALLBACK_MODEL = SERVING  # the fallback may answer: held at its price
    assert pricing.credits_at_most(kind="chat", tokens=1000, models=pricing.serving_models("chat")) == 3000
    assert pricing.tokens_within(kind="chat", credits=3000, models=pricing.serving_models("chat")) == 1000
    assert pricing.credits_at_most(kind="chat", tokens=1000) == 9000  # no models named: the kind's highest


def test_prices_in_effect(settings):
    settings.CREDITS_PER_1K_TOKENS = {**PRICED, "embedding:e5-large": 700, "vision": 2500}
    settings.CHAT_MODEL, settings.CHAT_FALLBACK_MODEL = SERVING, "small-chat"
    settings.EMBEDDING_MODEL, settings.VISION_MODEL = "e5-small", "eye-1"
    rows = [(p.kind, p.model, p.credits_per_1k) for p in pricing.prices_in_effect()]
    assert rows == [
        ("chat", SERVING, 3000),
        ("chat", "small-chat", 1000),
        ("chat", "", 1000),
        ("embedding", "e5-small", 500),
        ("embedding", "e5-large", 700),
        ("embedding", "", 500),
        ("vision", "eye-1", 2500),
        ("vision", "", 2500),
    ]
    settings.VISION_MODEL = ""
    assert "vision" not in {p.kind for p in pricing.prices_in_effect()}


def test_a_chat_turn_is_held_and_charged_at_the_serving_models_price(
    client, account_a, settings, fake_llm, upload_and_ingest
):
    settings.CHAT_MODEL = settings.CHAT_FALLBACK_MODEL = SERVING
    upload_and_ingest(account_a, "handbook.md", TEXT, "text/markdown")
    key = make_api_key(account_a)
    with account_context(account_a):
        credits_grant(account=account_a, amount=200_000, reason="room for two turns")

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
        return {"held": -written["hold"].delta, "query": written["embedding"], "answer": written["chat"]}

    # A priced embedding model that does not embed this account's queries changes nothing.
    flat, priced = turn(FLAT), turn({**PRICED, "embedding:unused-embedder": 9000})
    assert priced["answer"].model == SERVING
    assert priced["answer"].tokens == flat["answer"].tokens > 0
    assert priced["answer"].delta == 3 * flat["answer"].delta
    assert priced["query"].delta == flat["query"].delta  # embedding unchanged
    # The hold: the answer's worst case at 3:1, the query embedding's (a few credits) as before
    # (at the active model's 500, not the unused model's 9,000): 3 x flat - priced is twice
    # the query's part.
    assert 0 < 3 * flat["held"] - priced["held"] < flat["held"] // 100


def test_an_upload_and_the_retrieval_test_are_estimated_at_the_embedding_models_price(
    client_a, account_a, settings, fake_llm, upload_and_ingest
):
    from retrieval.embedding_models import active_embedding_model

    with account_context(account_a):
        active = active_embedding_model(account_id=account_a.pk).model
    settings.CREDITS_PER_1K_TOKENS = FLAT
    cheap = upload_and_ingest(account_a, "a.md", TEXT, "text/markdown")
    flat_page = client_a.get("/documents/retrieval-test/").context["credits_estimate"]
    settings.CREDITS_PER_1K_TOKENS = {**FLAT, f"embedding:{active}": 1500}
    dear = upload_and_ingest(account_a, "b.md", TEXT.replace(b"laptop", b"tablet"), "text/markdown")
    # 500 credits per 1,000 tokens for the kind, 1,500 for the model that embeds.
    # (The estimate counts the bundled tokenizer's tokens, the charge the provider's.)
    assert cheap.credits_charged == -(-cheap.embedding_tokens * 500 // 1000) > 0
    assert dear.credits_charged == -(-dear.embedding_tokens * 1500 // 1000)
    assert 2.95 * cheap.credits_estimate < dear.credits_estimate < 3.05 * cheap.credits_estimate  # near-same text
    charges = _entries(account_a, kind="embedding")
    assert charges[-1].model == active and -charges[-1].delta == dear.credits_charged
    page = client_a.get("/documents/retrieval-test/")
    assert page.context["credits_estimate"] == 3 * flat_page
    assert f'<strong data-testid="search-estimate">{3 * flat_page}</strong>' in page.content.decode()


def test_the_credits_page_shows_the_prices_and_why_credits_differ(client_a, account_a, settings):
    settings.CHAT_MODEL = settings.CHAT_FALLBACK_MODEL = SERVING
    settings.CREDITS_PER_1K_TOKENS = PRICED
    from billing.services import credits_debit

    with account_context(account_a):
        credits_debit(account=account_a, tokens=1559, key="turn", kind="chat", model=SERVING)
    with override_settings(VISION_MODEL=""):
        page = client_a.get("/credits/").content.decode()
    assert (
        '<tr data-price-kind="chat" data-model="fake-chat-3x"><td>fake-chat-3x</td><td>Chat</td><td class="num">3,000</td>'
        in page
    )
    assert "any other embedding model" in page
    assert "1,559 tokens · 4,677 credits: fake-chat-3x is priced at 3,000 credits per 1,000 tokens." in page


def test_an_image_description_is_charged_at_the_vision_models_price(
    account_a, owner_a, fake_llm, run_jobs, django_capture_on_commit_callbacks, settings
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from documents.services import document_upload
    from documents.tests.images import image_file
    from documents.tests.test_ocr import IMAGE_LINES

    settings.VISION_MODEL = "fake-vision"
    settings.CREDITS_PER_1K_TOKENS = {**FLAT, "vision:fake-vision": 3000}  # vision otherwise priced as chat, 1:1
    with account_context(account_a, user=owner_a), django_capture_on_commit_callbacks(execute=True):
        document, _ = document_upload(
            account=account_a,
            actor=owner_a,
            upload=SimpleUploadedFile("invoice.png", image_file(IMAGE_LINES, "png"), content_type="image/png"),
        )
    run_jobs()
    [entry] = _entries(account_a, idempotency_key__startswith=f"vision:{document.pk}:")
    assert entry.model == "fake-vision" and entry.tokens > 0
    assert entry.delta == -3 * entry.tokens
