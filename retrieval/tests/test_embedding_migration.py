"""Embedding models change safely: a migration to a model of another
dimension builds the new vectors beside the old, search never compares a query with vectors
of another model (also while the migration runs and documents keep arriving), the switch is
atomic, a cancel leaves the old model serving, and the Knowledge base shows the estimate."""

import pytest
from django.db import connection

from accounts.tests.factories import add_member
from billing.models import CreditLedgerEntry
from billing.services import credits_grant
from core.tenancy import account_context
from documents import services
from documents.embedding import active_embedding_model
from documents.models import Chunk, ChunkEmbedding, Document, ReindexRun, Status
from retrieval import services as retrieval_services
from retrieval.embedding_models import migration_step, model_change
from retrieval.search import search_for_query

OLD, NEW, NEW_DIMS = "model-a", "model-b", 256
TOPICS = [
    "holiday days are booked in the portal",
    "laptops are repaired at the hardware desk",
    "the kitchen fridge is emptied on friday",
    "expenses are approved by the team lead",
]


def _text(topic: str, paragraphs: int) -> bytes:
    return "\n\n".join(f"Part {i}. " + (topic + ". ") * 12 for i in range(paragraphs)).encode()


@pytest.fixture
def two_models(fake_llm, settings):
    """The fake provider serves OLD (384-d) and NEW (256-d); the account starts on OLD."""
    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = OLD, 384
    fake_llm.backend.model_dimensions = {NEW: NEW_DIMS}
    return fake_llm


@pytest.fixture
def library(two_models, account_a, upload_and_ingest):
    with account_context(account_a):
        credits_grant(account=account_a, amount=1_000_000, reason="migration tests")
    # One long document (three embedding batches) and two short ones.
    docs = [upload_and_ingest(account_a, "long.txt", _text(TOPICS[0], 200))]
    docs += [upload_and_ingest(account_a, f"doc{i}.txt", _text(t, 3)) for i, t in enumerate(TOPICS[1:3])]
    assert all(d.status == Status.READY for d in docs), [d.error for d in docs]
    assert 192 < docs[0].chunk_count <= 288, docs[0].chunk_count
    return docs


class VectorQueries:
    """Every vector comparison the database is asked for: the model and dimension filtered on."""

    def __init__(self):
        self.seen = []

    def __call__(self, execute, sql, params, many, context):
        if "<=>" in sql and isinstance(params, dict):
            self.seen.append((params.get("model"), len(params["vector"].strip("[]").split(","))))
        return execute(sql, params, many, context)


def _search(account, query, n, server):
    """search_for_query, returning the model the query was embedded with, the (model, dims)
    its vectors were compared with, the models of the chunks found by vector, and the hits."""
    watch = VectorQueries()
    before = len(server.requests_to("/v1/embeddings"))
    with account_context(account), connection.execute_wrapper(watch):
        hits = search_for_query(account=account, query=query, key=f"search:{n}")
    with account_context(account):
        found = set(
            Chunk.objects.for_account(account)
            .filter(pk__in=[h.chunk_id for h in hits if h.similarity])
            .values_list("embedding_model", flat=True)
        )
    requests = server.requests_to("/v1/embeddings")[before:]
    assert len(requests) == 1
    return requests[0]["model"], watch.seen, found, hits


def _start(account, owner, capture):
    with account_context(account), capture(execute=False):  # the test drives the steps
        return retrieval_services.embedding_migration_start(account=account, actor=owner)


def test_a_model_change_mid_run_never_mixes_models(
    library, account_a, owner_a, settings, two_models, upload_and_ingest, django_capture_on_commit_callbacks
):
    with account_context(account_a):
        assert active_embedding_model(account_id=account_a.pk).model == OLD
    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = NEW, NEW_DIMS
    with account_context(account_a):
        change = model_change(account=account_a)
    assert change.documents == 3 and change.batches == 3 + 1 + 1
    assert change.credits_estimate == sum(d.embedding_tokens for d in library)
    run = _start(account_a, owner_a, django_capture_on_commit_callbacks)
    assert run.kind == "migration" and run.progress_total == 5

    searches, steps, late = [], 0, None
    while True:
        searches.append(_search(account_a, TOPICS[steps % 3], len(searches), two_models))
        if steps == 2 and late is None:
            # A document published mid-migration: embedded with the active (old) model, then
            # covered by the migration before it switches.
            late = upload_and_ingest(account_a, "late.txt", _text(TOPICS[3], 2))
            with account_context(account_a):
                assert Chunk.objects.for_account(account_a).filter(document=late).first().embedding_model == OLD
        with account_context(account_a):
            more = migration_step(account_id=account_a.pk, run_id=run.pk)
        steps += 1
        if not more:
            break
    searches.append(_search(account_a, TOPICS[3], len(searches), two_models))

    for query_model, compared, found, hits in searches:
        assert hits, "every search finds something"
        assert compared and all(model == query_model for model, _dims in compared), (query_model, compared)
        assert {d for _m, d in compared} == {384 if query_model == OLD else NEW_DIMS}
        assert found <= {query_model}
    models = [s[0] for s in searches]
    assert models[0] == OLD and models[-1] == NEW and models == sorted(models)  # old ... old, new ... new
    assert steps == 5 + 1 + 1  # five batches, the late document's batch, the switch

    with account_context(account_a):
        run.refresh_from_db()
        active = active_embedding_model(account_id=account_a.pk)
        assert (active.model, active.dimensions) == (NEW, NEW_DIMS)
        assert run.status == "done" and run.done == run.total == 4
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT embedding_model, vector_dims(embedding) FROM documents_chunk WHERE account_id = %s",
                [account_a.pk],
            )
            assert cursor.fetchall() == [(NEW, NEW_DIMS)]  # the old vectors are gone
        assert not ChunkEmbedding.objects.for_account(account_a).exists()
        documents = Document.objects.for_account(account_a).filter(status=Status.READY)
        assert set(documents.values_list("embedding_model", flat=True)) == {NEW}
        charged = CreditLedgerEntry.objects.for_account(account_a).filter(
            idempotency_key__startswith=f"embedding-migration:{run.pk}:"
        )
        assert charged.count() == 6 and {e.spent_by_user_id for e in charged} == {owner_a.pk}
        assert run.credits_charged == -sum(e.delta for e in charged) == sum(d.embedding_tokens for d in documents)
        assert model_change(account=account_a) is None


def test_new_documents_after_the_switch_use_the_new_model(
    library, account_a, owner_a, settings, two_models, upload_and_ingest, django_capture_on_commit_callbacks
):
    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = NEW, NEW_DIMS
    run = _start(account_a, owner_a, django_capture_on_commit_callbacks)
    with account_context(account_a):
        while migration_step(account_id=account_a.pk, run_id=run.pk):
            pass
    late = upload_and_ingest(account_a, "late.txt", _text(TOPICS[3], 2))
    assert late.status == "ready" and late.embedding_model == NEW
    query_model, compared, found, hits = _search(account_a, TOPICS[3], 99, two_models)
    assert query_model == NEW and hits[0].document_id == late.pk and found == {NEW}


def test_cancel_leaves_the_old_model_serving(
    library, account_a, owner_a, settings, two_models, django_capture_on_commit_callbacks
):
    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = NEW, NEW_DIMS
    run = _start(account_a, owner_a, django_capture_on_commit_callbacks)
    with account_context(account_a):
        assert migration_step(account_id=account_a.pk, run_id=run.pk)
        assert migration_step(account_id=account_a.pk, run_id=run.pk)
        assert ChunkEmbedding.objects.for_account(account_a).count() == 2 * 96
        services.account_reindex_cancel(account=account_a, run=run)
        assert not migration_step(account_id=account_a.pk, run_id=run.pk)
        run.refresh_from_db()
        assert run.status == "cancelled" and run.progress_done == 2
        assert not ChunkEmbedding.objects.for_account(account_a).exists()
        assert active_embedding_model(account_id=account_a.pk).model == OLD
        assert set(Chunk.objects.for_account(account_a).values_list("embedding_model", flat=True)) == {OLD}
    query_model, compared, found, hits = _search(account_a, TOPICS[1], 1, two_models)
    assert query_model == OLD and hits and found == {OLD}


def test_knowledge_base_shows_the_estimate_and_owners_start_it(
    library, account_a, owner_a, client, settings, django_capture_on_commit_callbacks
):
    client.force_login(owner_a)
    assert b"Start migration" not in client.get("/documents/").content  # nothing to migrate
    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = NEW, NEW_DIMS
    page = client.get("/documents/").content.decode()
    estimate = sum(d.embedding_tokens for d in library)
    assert "Start migration" in page and f'data-testid="migration-estimate">{estimate}<' in page
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post("/documents/embedding-model/migrate/")
    assert response.status_code == 302
    with account_context(account_a):
        run = ReindexRun.objects.for_account(account_a).get(kind="migration")
    assert run.status == "running" and run.credits_estimate == estimate and run.created_by == owner_a
    page = client.get("/documents/").content.decode()
    assert "0/5 batches" in page and "Cancel migration" in page


def test_members_cannot_start_a_migration_and_other_accounts_see_nothing(
    library, account_a, account_b, client, settings
):
    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = NEW, NEW_DIMS
    member = add_member(account_a, role="member")
    client.force_login(member)
    assert b"Start migration" not in client.get("/documents/").content
    assert client.post("/documents/embedding-model/migrate/").status_code == 403
    with account_context(account_a):
        assert not ReindexRun.objects.for_account(account_a).exists()
    client.force_login(account_b.test_owner)
    assert b"Start migration" not in client.get("/documents/").content  # B has no documents to move
    with account_context(account_b):
        assert model_change(account=account_b) is None  # no chunks: it starts on the configured model


def test_publishing_with_a_stale_model_embeds_again(library, account_a, settings, two_models, upload_and_ingest):
    """A document embedded with the old model but published after the switch is embedded
    again with the new one (ingestion._publish checks the active model under its lock)."""
    from documents import ingestion
    from documents.models import ActiveEmbeddingModel

    real_embed_all = ingestion._embed_all

    def embed_then_switch(document, drafts, **options):
        batches = real_embed_all(document, drafts, **options)
        if batches[0].model == OLD:  # the switch lands between embedding and publishing
            with account_context(account_a):
                ActiveEmbeddingModel.objects.for_account(account_a).update(model=NEW, dimensions=NEW_DIMS)
        return batches

    ingestion._embed_all = embed_then_switch
    try:
        late = upload_and_ingest(account_a, "late.txt", _text(TOPICS[3], 2))
    finally:
        ingestion._embed_all = real_embed_all
    assert late.status == "ready" and late.embedding_model == NEW
    with account_context(account_a):
        assert set(
            Chunk.objects.for_account(account_a).filter(document=late).values_list("embedding_model", flat=True)
        ) == {NEW}


def test_any_dimension_ingests(two_models, account_a, settings, upload_and_ingest):
    """EMBEDDING_DIMENSIONS other than 384 no longer fails every ingestion (an account without
    documents starts on the configured model)."""
    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = NEW, NEW_DIMS
    with account_context(account_a):
        credits_grant(account=account_a, amount=10_000, reason="test")
    document = upload_and_ingest(account_a, "a.txt", _text(TOPICS[1], 2))
    assert document.status == "ready", document.error
    query_model, compared, found, hits = _search(account_a, TOPICS[1], 1, two_models)
    assert query_model == NEW and {d for _m, d in compared} == {NEW_DIMS} and hits[0].document_id == document.pk


def test_a_stale_migration_is_requeued_and_resumes_without_paying_twice(
    library, account_a, owner_a, settings, two_models, run_jobs, django_capture_on_commit_callbacks
):
    """A migration whose worker died after two batches: the sweeper re-queues the run, which
    embeds only the batches not written and charges each batch once."""
    import datetime as dt

    from documents.jobs import requeue_stale_work

    settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS = NEW, NEW_DIMS
    run = _start(account_a, owner_a, django_capture_on_commit_callbacks)
    with account_context(account_a):
        assert migration_step(account_id=account_a.pk, run_id=run.pk)
        assert migration_step(account_id=account_a.pk, run_id=run.pk)
        ReindexRun.objects.for_account(account_a).filter(pk=run.pk).update(
            heartbeat_at=run.created_at - dt.timedelta(hours=1)
        )
    before = len(two_models.requests_to("/v1/embeddings"))
    with django_capture_on_commit_callbacks(execute=True):
        assert requeue_stale_work() == 1
    run_jobs()
    assert len(two_models.requests_to("/v1/embeddings")) - before == 3  # the three batches left
    with account_context(account_a):
        run.refresh_from_db()
        assert run.status == "done" and run.progress_done == 5
        keys = list(
            CreditLedgerEntry.objects.for_account(account_a)
            .filter(idempotency_key__startswith=f"embedding-migration:{run.pk}:")
            .values_list("idempotency_key", flat=True)
        )
        assert len(keys) == len(set(keys)) == 5
        assert active_embedding_model(account_id=account_a.pk).model == NEW
