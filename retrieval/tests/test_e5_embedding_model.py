"""multilingual-e5-small as an embedding model: the app puts e5's
"passage: " before a document's text and "query: " before a search query itself, so any
provider hosting e5 is called the same way; the credits are the provider's tokens; and an
account on MiniLM moves to e5 through the embedding-model migration and searches after it."""

import pytest

from billing.models import CreditLedgerEntry
from billing.services import credits_grant
from core.tenancy import account_context
from documents.embedding import active_embedding_model
from documents.models import Chunk, Status
from llm.embedding_specs import Purpose, embedding_spec
from llm.fake_server import count_tokens  # the fake provider's tokenizer: what it reports
from retrieval import services as retrieval_services
from retrieval.embedding_models import migration_run
from retrieval.search import search_for_query

MINILM, E5 = "all-minilm-l6-v2", "multilingual-e5-small"
TEXT = b"Expenses are approved by the team lead within five working days of the request."


def _inputs(server, since=0):
    return [text for body in server.requests_to("/v1/embeddings")[since:] for text in body["input"]]


def test_the_prefixes_are_properties_of_the_model():
    assert embedding_spec(E5).prefixed(["a"], Purpose.QUERY) == ["query: a"]
    assert embedding_spec("intfloat/Multilingual-E5-Small").prefixed(["a"], Purpose.PASSAGE) == ["passage: a"]
    assert embedding_spec(MINILM).prefixed(["a"], Purpose.QUERY) == ["a"]
    assert embedding_spec("text-embedding-3-small").prefixed(["a"], Purpose.PASSAGE) == ["a"]


def test_e5_documents_are_embedded_as_passages_and_queries_as_queries(fake_llm, settings, account_a, upload_and_ingest):
    settings.EMBEDDING_MODEL = E5  # the default for a new account
    document = upload_and_ingest(account_a, "expenses.txt", TEXT)
    assert document.status == Status.READY and document.embedding_model == E5
    passages = _inputs(fake_llm)
    assert passages and all(t.startswith("passage: ") for t in passages)
    # Charged the provider's tokens: the fake counts them on the text it was sent, prefix included.
    assert document.embedding_tokens == sum(count_tokens(t) for t in passages)
    before = len(fake_llm.requests_to("/v1/embeddings"))
    with account_context(account_a):
        hits = search_for_query(account=account_a, query="who approves expenses", key="search:e5")
    assert _inputs(fake_llm, before) == ["query: who approves expenses"]
    assert [h.document_id for h in hits][:1] == [document.pk]
    with account_context(account_a):
        entry = CreditLedgerEntry.objects.for_account(account_a).get(idempotency_key="search:e5")
    assert -entry.delta == max(1, count_tokens("query: who approves expenses"))


def test_an_account_on_minilm_moves_to_e5_and_searches_after(
    fake_llm, settings, account_a, owner_a, upload_and_ingest, django_capture_on_commit_callbacks
):
    settings.EMBEDDING_MODEL = MINILM
    with account_context(account_a):
        credits_grant(account=account_a, amount=100_000, reason="migration")
    document = upload_and_ingest(account_a, "expenses.txt", TEXT)
    assert not any(t.startswith("passage: ") for t in _inputs(fake_llm))  # MiniLM: bare text
    settings.EMBEDDING_MODEL = E5  # the install's new default: the owner starts the migration
    before = len(fake_llm.requests_to("/v1/embeddings"))
    with account_context(account_a), django_capture_on_commit_callbacks(execute=False):
        run = retrieval_services.embedding_migration_start(account=account_a, actor=owner_a)
    migration_run(account_id=account_a.pk, run_id=run.pk)
    migrated = _inputs(fake_llm, before)
    assert migrated and all(t.startswith("passage: ") for t in migrated)
    with account_context(account_a):
        assert active_embedding_model(account_id=account_a.pk).model == E5
        assert set(Chunk.objects.for_account(account_a).values_list("embedding_model", flat=True)) == {E5}
        before = len(fake_llm.requests_to("/v1/embeddings"))
        hits = search_for_query(account=account_a, query="who approves expenses", key="search:after")
    assert fake_llm.requests_to("/v1/embeddings")[before]["model"] == E5
    assert _inputs(fake_llm, before) == ["query: who approves expenses"]
    assert hits and hits[0].document_id == document.pk


@pytest.mark.parametrize("model", [MINILM, E5])
def test_another_accounts_search_never_sees_the_document(
    fake_llm, settings, account_a, account_b, upload_and_ingest, model
):
    settings.EMBEDDING_MODEL = model
    theirs = upload_and_ingest(account_a, "expenses.txt", TEXT)
    ours = upload_and_ingest(account_b, "kitchen.txt", b"The kitchen fridge is emptied every Friday afternoon.")
    with account_context(account_b):
        hits = search_for_query(account=account_b, query="who approves expenses", key="search:b")
    assert {h.document_id for h in hits} <= {ours.pk} and theirs.pk not in {h.document_id for h in hits}
