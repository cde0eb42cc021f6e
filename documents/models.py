"""Documents, their searchable chunks, staged embeddings and reindex runs."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models.expressions import RawSQL
from pgvector.django import VectorField

from core.fair_queue import FairLane, fairest_index
from core.tenancy import AllAccountsManager, TenantManager, TenantModel, TenantQuerySet

# The vectors column is untyped (`vector`, any dimension): each chunk's vector is of its
# `embedding_model`, and search compares only vectors of the account's active model
# (ActiveEmbeddingModel). HNSW indexes are per dimension, on the expression
# `(embedding::vector(N))` with the predicate `vector_dims(embedding) = N` (migration 0010,
# retrieval/search/maintenance.py); 384 is the dimension of the bundled model.
EMBEDDING_DIMENSIONS = 384


class RegConfigField(models.TextField):
    """A PostgreSQL `regconfig` (a text-search configuration's name, e.g. "german"): the type
    to_tsvector(regconfig, text) takes, so a generated tsvector can use it and stay IMMUTABLE."""

    def db_type(self, connection):
        return "regconfig"


@RegConfigField.register_lookup
class RegConfigExact(models.lookups.Exact):
    """`search_config="english"`: the value cast to regconfig (regconfig has no = of its own;
    PostgreSQL would compare it as an oid and fail to read "english" as one)."""

    def process_rhs(self, compiler, connection):
        sql, params = super().process_rhs(compiler, connection)
        return f"({sql})::regconfig", params


class Status(models.TextChoices):
    PENDING = "pending", "Pending"
    PROCESSING = "processing", "Processing"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"
    DELETING = "deleting", "Deleting"


# "A document being deleted is gone for every reader at once": the one rule, written once
# for the ORM (`visible()`) and once for raw SQL (this fragment, on `documents_document AS d`).
VISIBLE_DOCUMENT_SQL = f"d.status <> '{Status.DELETING.value}'"

# "A principal reads only the collections it may see": the one rule, written once in SQL as
# the function `visible_collection_ids()` (migration 0007_collection_visibility), which reads
# the transaction's principal (account_context's user / api_key). The row-level-security
# policy `collection_visibility` on documents and chunks, the full-text search function,
# raw search SQL and the ORM (`DocumentQuerySet.readable()`) all use it. In parentheses it
# is an InitPlan: evaluated once per statement, not once per row.
VISIBLE_COLLECTION_IDS_SQL = "(SELECT public.visible_collection_ids())::bigint[]"
READABLE_DOCUMENT_SQL = f"d.collection_id = ANY ({VISIBLE_COLLECTION_IDS_SQL})"

# "A document carrying a tag the account excludes (RetrievalSettings) is never retrieved; a
# retrieval asked for `tags` reads only documents carrying one of them, and never those with
# one of its `exclude_tags`": the one rule in SQL, on `documents_document AS d`, tags compared
# lower-cased (documents/tags.py: tags are unique case-insensitively). Parameters:
# %(account_id)s, %(exclude_tags)s (text[], lower-cased, may be empty) and %(tags)s (text[]
# lower-cased, or NULL: no narrowing). The account's setting is an uncorrelated sub-select
# (an InitPlan, read once per statement). No braces in it: search SQL goes through format().
_DOCUMENT_TAGS_LOWER = "ARRAY(SELECT lower(t.tag) FROM unnest(d.tags) AS t(tag))"
ACCOUNT_EXCLUDED_TAGS_SQL = (
    "ARRAY(SELECT lower(t.tag) FROM documents_retrievalsettings AS r,"
    " unnest(r.exclude_tags) AS t(tag) WHERE r.account_id = %(account_id)s)"
)
RETRIEVABLE_BY_TAGS_SQL = (
    f"(NOT ({_DOCUMENT_TAGS_LOWER} && ({ACCOUNT_EXCLUDED_TAGS_SQL}"
    " || COALESCE(%(exclude_tags)s::text[], ARRAY[]::text[])))"
    f" AND (%(tags)s::text[] IS NULL OR {_DOCUMENT_TAGS_LOWER} && %(tags)s::text[]))"
)
DEFAULT_COLLECTION_NAME = "General"


class Collection(TenantModel):
    """A group of documents. Every account has one default collection ("General"); a
    restricted collection is seen only by the members and API keys given access to it, by
    owners and admins, and by system jobs (a context without a principal)."""

    name = models.CharField(max_length=100)
    restricted = models.BooleanField(default=False)
    is_default = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "name"], name="collection_name_unique_per_account"),
            models.UniqueConstraint(
                fields=["account"], condition=models.Q(is_default=True), name="collection_one_default_per_account"
            ),
        ]

    def __str__(self):
        return self.name


class CollectionAccess(TenantModel):
    """One member or one API key that may read a restricted collection."""

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="access")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    api_key = models.ForeignKey("accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(user__isnull=False, api_key__isnull=True)
                    | models.Q(user__isnull=True, api_key__isnull=False)
                ),
                name="collection_access_user_xor_key",
            ),
            models.UniqueConstraint(fields=["collection", "user"], name="collection_access_user_unique"),
            models.UniqueConstraint(fields=["collection", "api_key"], name="collection_access_key_unique"),
        ]


class DocumentQuerySet(TenantQuerySet):
    def visible(self):
        """Documents readers may see: every status but `deleting`."""
        return self.exclude(status=Status.DELETING)

    def readable(self):
        """Visible documents in the collections the transaction's principal may see."""
        return self.visible().filter(collection_id__in=RawSQL(f"SELECT unnest({VISIBLE_COLLECTION_IDS_SQL})", ()))


class Document(TenantModel):
    # RESTRICT, not PROTECT: a collection with documents cannot be deleted on its own, but an
    # account's deletion removes its collections together with their documents.
    collection = models.ForeignKey("Collection", on_delete=models.RESTRICT, related_name="documents")
    name = models.CharField(max_length=255, help_text="Display only, sanitised")
    title = models.CharField(max_length=255, blank=True)
    kind = models.CharField(max_length=16)
    content_type = models.CharField(max_length=128)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    file = models.FileField(max_length=500)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING, db_index=True)
    error = models.TextField(blank=True)
    error_code = models.CharField(max_length=40, blank=True)
    revision = models.PositiveIntegerField(default=1)
    attempts = models.PositiveSmallIntegerField(default=0)
    page_count = models.PositiveIntegerField(null=True, blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    token_count = models.PositiveIntegerField(default=0, help_text="Tokens of the stored chunks")
    embedding_tokens = models.PositiveIntegerField(default=0, help_text="Provider-reported tokens, as charged")
    credits_estimate = models.PositiveIntegerField(
        null=True, blank=True, help_text="Credits the revision's embedding should cost, counted before embedding"
    )
    credits_charged = models.PositiveIntegerField(default=0)
    embedding_model = models.CharField(max_length=200, blank=True)
    embedding_provider = models.CharField(max_length=200, blank=True)
    # Detected at ingestion (documents/language.py): ISO 639-1, "" when it could not be told;
    # its chunks are indexed and searched with `search_config` (migration 0015).
    language = models.CharField(max_length=8, blank=True, default="")
    search_config = RegConfigField(db_default="english")
    # Set by people (page, API, upload) and sources: documents/tags.py's rules. They steer
    # retrieval (RETRIEVABLE_BY_TAGS_SQL) and filter the Knowledge base.
    tags = ArrayField(models.TextField(), default=list, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    # The revision's chunks (counted once it is read) and how many are embedded so far: the
    # API's progress and the pages' "412/1,250 chunks" (documents/progress.py).
    chunks_total = models.PositiveIntegerField(default=0)
    chunks_embedded = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Waiting (pending) for a model server that was busy or unreachable: what it waits for,
    # said to people, and when the queue takes it again; how many times it has waited so far
    # (the next wait is longer). Cleared once it is ready or failed.
    retry_at = models.DateTimeField(null=True, blank=True)
    wait_message = models.TextField(blank=True, default="")
    provider_waits = models.PositiveSmallIntegerField(default=0)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # A document uploaded with an API key is the key's (never its creator's): the key's budgets
    # pay for and limit its ingestion and reindexing, as a member's do for what they upload.
    uploaded_by_api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    # TenantModel's two managers, with `visible()`. NOTE: a model that declares managers of
    # its own no longer inherits TenantModel.Meta's default_manager_name; its first declared
    # manager is the default instead. So `all_accounts` comes first, as TenantModel intends
    # (and the migration state is unchanged).
    all_accounts = AllAccountsManager.from_queryset(DocumentQuerySet)()
    objects = TenantManager.from_queryset(DocumentQuerySet)()

    class Meta:
        constraints = [
            # The same bytes twice in one account are one document (unless it is being deleted).
            # (Per collection: a principal who cannot see a restricted collection must be able to
            # upload the same file elsewhere without learning that it exists.)
            models.UniqueConstraint(
                fields=["collection", "sha256"],
                condition=~models.Q(status="deleting"),
                name="document_sha256_unique_per_collection",
            ),
        ]
        indexes = [
            models.Index(fields=["account", "-created_at"], name="document_account_recent"),
            GinIndex(fields=["tags"], name="document_tags_gin"),
        ]

    def __str__(self):
        return self.name


class TextSource(models.TextChoices):
    TEXT = "text", "Text"
    OCR = "ocr", "OCR"
    VISION = "vision", "Image description"


class Chunk(TenantModel):
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    # The document's collection, copied so that search filters on an indexed column of the
    # chunk itself (moving a document updates its chunks in the same transaction).
    collection = models.ForeignKey(Collection, on_delete=models.RESTRICT, related_name="+")
    revision = models.PositiveIntegerField()
    chunk_index = models.PositiveIntegerField()
    content = models.TextField()
    token_count = models.PositiveIntegerField()
    page_start = models.PositiveIntegerField(null=True, blank=True)
    page_end = models.PositiveIntegerField(null=True, blank=True)
    heading_path = models.JSONField(default=list, blank=True)
    # Where the text came from: the file's own text, OCR of an image or a scanned page, or a
    # vision model's description of an image; citations say so.
    text_source = models.CharField(max_length=10, choices=TextSource.choices, default=TextSource.TEXT)
    prev_chunk_id = models.BigIntegerField(null=True, blank=True)
    next_chunk_id = models.BigIntegerField(null=True, blank=True)
    embedding = VectorField()  # any dimension: see EMBEDDING_DIMENSIONS above
    embedding_model = models.CharField(max_length=200)
    # The document's text-search configuration at publish (documents/language.py); chunks
    # made before migration 0015 keep "english", which they were indexed with.
    search_config = RegConfigField(db_default="english")
    search_vector = models.GeneratedField(
        expression=SearchVector("content", config=models.F("search_config")),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["document", "revision", "chunk_index"], name="chunk_position_unique"),
        ]
        # The HNSW indexes are expression indexes per dimension, made in SQL (migration 0010 and
        # search.maintenance.ensure_dimension_vector_index), which Django's Index cannot express.
        indexes = [
            GinIndex(fields=["search_vector"], name="chunk_search_gin"),
            models.Index(fields=["document", "chunk_index"], name="chunk_document_order"),
        ]

    def __str__(self):
        return f"{self.document_id}#{self.chunk_index}"


class EmbeddingBatch(TenantModel):
    """Embeddings staged per (document, revision, batch) so a retried job embeds nothing twice."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="+")
    revision = models.PositiveIntegerField()
    batch_index = models.PositiveIntegerField()
    vectors = models.BinaryField(help_text="float32, row-major, one row per chunk of the batch")
    count = models.PositiveIntegerField()
    tokens = models.PositiveIntegerField()
    model = models.CharField(max_length=200)
    provider = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["document", "revision", "batch_index"], name="embedding_batch_unique"),
        ]


class IngestionLane(FairLane):
    """An account's place in the fair ingestion queue (documents/ingestion_queue.py, by the
    rule of core/fair_queue.py), so a claim finds the fairest account through one index
    instead of ranking every account that has documents waiting (docs/benchmarks.md, "The
    claim with thousands of accounts waiting").

    `waiting` is set by the database: a trigger (migration 0013) marks the lane waiting in the
    same transaction as any document becoming pending, whatever wrote it. The claim clears it
    once the account has no pending document left, under the lane's row lock, so a document
    that becomes pending meanwhile waits for that lock and marks the lane again.
    `served_at` is when a fair claim last took one of the account's documents."""

    class Meta:
        indexes = [fairest_index("ingestion_lane_fairest")]


class ReindexRun(TenantModel):
    """Re-embedding a whole account, with progress: a reindex (new revisions of every
    document) or an embedding-model migration (vectors of a new model built beside the old
    ones in ChunkEmbedding, then switched to at once; see retrieval/embedding_models.py)."""

    class RunStatus(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        CANCELLED = "cancelled", "Cancelled"
        FAILED = "failed", "Failed"

    class RunKind(models.TextChoices):
        REINDEX = "reindex", "Reindex"
        MIGRATION = "migration", "Embedding model migration"

    kind = models.CharField(max_length=10, choices=RunKind.choices, default=RunKind.REINDEX)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    embedding_model = models.CharField(max_length=200)
    embedding_dimensions = models.PositiveIntegerField(default=0)
    # A reindex: the document being reindexed and the revision the run gave it, so a resumed
    # run (after a worker died) finishes that revision instead of starting another.
    current_document_id = models.BigIntegerField(null=True, blank=True)
    current_revision = models.PositiveIntegerField(null=True, blank=True)
    # A migration: embedding batches done / to do (progress), credits estimated before it
    # started (the stored provider tokens of the documents) and charged so far.
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    credits_estimate = models.PositiveIntegerField(default=0)
    credits_charged = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    document_ids = models.JSONField(default=list)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)


class ActiveEmbeddingModel(TenantModel):
    """The embedding model an account's search uses: queries are embedded with it and
    compared only with chunk vectors of it. Changed only by a finished migration, in the
    transaction that swaps the vectors (retrieval/embedding_models.py)."""

    model = models.CharField(max_length=200)
    dimensions = models.PositiveIntegerField()
    switched_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account"], name="active_embedding_model_per_account")]


class ChunkEmbedding(TenantModel):
    """A chunk's vector of a model the account is migrating to, built beside the one search
    uses; moved into the chunk when the migration switches, dropped when it is cancelled."""

    chunk = models.ForeignKey(Chunk, on_delete=models.CASCADE, related_name="+")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    embedding = VectorField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["chunk", "model"], name="chunk_embedding_unique")]
        indexes = [models.Index(fields=["document", "model"], name="chunk_embedding_document")]


class RetrievalSettings(TenantModel):
    """How an account's retrieval behaves, one row per account (none: the defaults).
    `exclude_tags`: documents carrying any of these tags are never retrieved, on any surface
    (RETRIEVABLE_BY_TAGS_SQL); set by owners and admins (documents/tags.py), audited."""

    exclude_tags = ArrayField(models.TextField(), default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account"], name="retrieval_settings_per_account")]
