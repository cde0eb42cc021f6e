"""Tenancy: the account context and the two locks on every door.

1. Application: tenant-owned models inherit `TenantModel`, whose manager fails closed
   (`Model.objects.all()` raises; use `Model.objects.for_account(account)`).
2. Database: row-level security on every tenant table, reading the transaction-local
   setting `app.account_id`, which `account_context()` sets at the start of every unit of
   work (request, job, websocket message) and restores in `finally`.

The only ways around either lock are `Model.all_accounts` (ORM) and
`dangerously_bypass_tenancy(reason=...)` (database), both loud and logged.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
from contextvars import ContextVar
from dataclasses import dataclass

import psycopg
from django.conf import settings
from django.db import connection, models, transaction

logger = logging.getLogger("groundwork.tenancy")


class UnscopedQueryError(RuntimeError):
    """A tenant-owned model was queried without naming the account."""


@dataclass(frozen=True)
class TenantContext:
    account_id: int | None = None
    user_id: int | None = None
    api_key_id: int | None = None
    api_key_hash: str | None = None
    bypass_reason: str | None = None

    @property
    def is_active(self) -> bool:
        """Inside a unit of work that opened its own transaction."""
        return any((self.account_id, self.user_id, self.api_key_id, self.api_key_hash, self.bypass_reason))


_context: ContextVar[TenantContext] = ContextVar("groundwork_tenant", default=TenantContext())
_SETTINGS_SQL = (
    "SELECT set_config('app.account_id', %s, true), set_config('app.user_id', %s, true),"
    " set_config('app.api_key_id', %s, true), set_config('app.api_key_hash', %s, true),"
    " set_config('app.bypass_rls', %s, true), set_config('app.context_sig', %s, true)"
)


def current_context() -> TenantContext:
    return _context.get()


def current_account_id() -> int | None:
    return _context.get().account_id


def context_signing_key() -> bytes:
    """The key that signs contexts: derived from SECRET_KEY, never stored by the app. The
    database holds a copy its app role cannot read (core.rls, core.db_owner)."""
    return hmac.new(settings.SECRET_KEY.encode(), b"groundwork row-level-security context v1", hashlib.sha256).digest()


def _settings_values(ctx: TenantContext | None = None, **fields) -> list[str]:
    """The context's fields as text, in core.rls.CONTEXT_FIELDS order."""
    ctx = ctx or TenantContext(**fields)
    return [
        str(ctx.account_id or ""),
        str(ctx.user_id or ""),
        str(ctx.api_key_id or ""),
        ctx.api_key_hash or "",
        "on" if ctx.bypass_reason else "",
    ]


def _sign(values: list[str]) -> str:
    """SHA-256(k || SHA-256(k || fields)): what groundwork_private.ctx_signed() recomputes."""
    key = context_signing_key()
    inner = hashlib.sha256(key + "|".join(values).encode()).digest()
    return hashlib.sha256(key + inner).hexdigest()


# A transaction whose commit need not wait for the disk (account_context(flush=False)).
_NO_FLUSH_SQL = _SETTINGS_SQL + ", set_config('synchronous_commit', 'off', true)"


def _apply(ctx: TenantContext, *, flush: bool = True) -> None:
    """Write the signed context into the current transaction's settings: `set_config(...,
    true)` is transaction-local, never a session-level SET that would leak across a pooled
    connection. Rolled back with its transaction or savepoint.

    The values travel as bound parameters of a server-side statement (psycopg's own
    cursor, not Django's client-side binding), so the signature never appears in a query
    text another session of the same role could read in pg_stat_activity.
    """
    values = _settings_values(ctx)
    connection.ensure_connection()
    # Through Django's error wrapper: a connection that broke (PostgreSQL restarted) raises
    # Django's OperationalError and is marked so, and the next close_old_connections() (a
    # request's end, a job's retry, ingestion_queue._release) replaces it instead of reusing it.
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(_SETTINGS_SQL if flush else _NO_FLUSH_SQL, [*values, _sign(values)], prepare=False)


@contextlib.contextmanager
def _enter(ctx: TenantContext, *, flush: bool = True):
    """Run the block in a transaction (or a savepoint) scoped to `ctx`."""
    outer = _context.get()
    nested = connection.in_atomic_block
    token = _context.set(ctx)
    try:
        with transaction.atomic():
            # A nested context is part of its outer transaction, whose commit it is.
            _apply(ctx, flush=flush or nested)
            yield ctx
            # NOTE: a nested context shares the outer transaction, so the outer settings
            # are put back on success. On an exception, or a block marked for rollback, the
            # savepoint's rollback restores them by itself (set_config(..., true) is undone
            # with the savepoint).
            if nested and not connection.needs_rollback:
                _apply(outer)
    finally:
        _context.reset(token)


def account_context(account=None, *, account_id: int | None = None, user=None, api_key=None, flush: bool = True):
    """The unit of work for one account: ContextVar + transaction-local `app.account_id`.

    `user` / `api_key` name the principal acting (a member's session, or an integration's
    key): policies that narrow an account further (restricted collections) read them.
    Use around a request, a job or a websocket message. Nesting is allowed (a savepoint);
    the outer context is restored on exit.

    `flush=False`: the commit does not wait for the transaction's WAL to reach the disk
    (`synchronous_commit` off for this transaction only; a few ms a commit here). Only for
    rows whose loss in a database crash harms nobody and that a later commit of the same
    unit of work makes durable anyway: the WAL is flushed in order, so any later ordinary
    commit flushes this one too (a chat turn's question and hold, before its settle).
    """
    acct_id = account_id if account_id is not None else getattr(account, "pk", None)
    if not acct_id:
        raise UnscopedQueryError("account_context() needs an account")
    return _enter(
        TenantContext(
            account_id=int(acct_id), user_id=getattr(user, "pk", None), api_key_id=getattr(api_key, "pk", None)
        ),
        flush=flush,
    )


def user_context(user):
    """Lets a signed-in user read their own memberships across accounts, nothing else."""
    return _enter(TenantContext(user_id=user.pk))


def api_key_context(key_hash: str):
    """Lets authentication read the one API key whose hash it already knows."""
    return _enter(TenantContext(api_key_hash=key_hash))


def dangerously_bypass_tenancy(*, reason: str):
    """The audited escape hatch for staff (Django admin) and cross-account system jobs.

    Every use is logged with its reason. Never use it to serve a tenant's request.
    """
    if not reason:
        raise ValueError("dangerously_bypass_tenancy() needs a reason")
    logger.info("tenancy bypass: %s", reason)
    return _enter(TenantContext(bypass_reason=reason))


# --- the ORM lock ------------------------------------------------------------------------


class TenantQuerySet(models.QuerySet):
    pass


class TenantManager(models.Manager.from_queryset(TenantQuerySet)):
    """Fails closed: a query must name its account.

    Related managers (`account.memberships`, `document.chunks`) are allowed, because they
    are filtered by an object that was itself loaded under an account.
    """

    def get_queryset(self):
        if getattr(self, "core_filters", None) is None:
            raise UnscopedQueryError(
                f"{self.model.__name__}.objects needs an account: use "
                f"{self.model.__name__}.objects.for_account(account)"
            )
        return super().get_queryset()

    def for_account(self, account):
        if account is None or getattr(account, "pk", account) is None:
            raise UnscopedQueryError(f"{self.model.__name__}.objects.for_account() got no account")
        return super().get_queryset().filter(account_id=getattr(account, "pk", account))


class AllAccountsManager(models.Manager):
    """Every account's rows. For the admin and system jobs, which must also run inside
    `dangerously_bypass_tenancy()` or the database returns nothing."""


class TenantModel(models.Model):
    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, db_index=True)

    objects = TenantManager()
    all_accounts = AllAccountsManager()

    class Meta:
        abstract = True
        # Django's own machinery (admin, model forms, related managers, deletion) uses the
        # default and base managers; they read through RLS, which still confines them to
        # the transaction's account. Application code goes through `objects`.
        base_manager_name = "all_accounts"
        default_manager_name = "all_accounts"
