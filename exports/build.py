"""What a person's export holds, read account by account, and the zip it is packed into.

Each account is read in that account's own context (`account_context`), never through the
bypass, and every read names the person: the documents they uploaded (with their chunks,
their files and any ingestion still in progress), their own conversations with messages
and citations, the credits they spent (`spent_by_user`), their audit entries, their role.

The account's context carries no principal: a document the person uploaded into a
collection that has been restricted since is still theirs to take away (their upload, their
data), and the reads filter by `uploaded_by` themselves, so nobody else's document is ever
read. Conversations, usage and audit entries are filtered to the person the same way.

A team whose members must sign in with SSO is left out unless the session that asked for the
export signed in through it (`by_sso`; the rule is accounts/sso/session.py's `sso_shuts_out`):
the export's manifest (`left_out`), its row and its page name each team left out and why.

Limits are checked before anything is written (`plan`), so a refusal never leaves a partial
file: more than EXPORT_MAX_PENDING_RECORDS pending-ingestion records, more than
EXPORT_MAX_PENDING_BYTES of them serialized, more than EXPORT_MAX_FILE_BYTES of files.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field

from django.conf import settings
from django.core.files.storage import default_storage
from django.db.models import Q, Sum
from django.db.models.functions import Length
from django.utils import timezone

from accounts.models import Membership
from accounts.selectors import membership_list_for_user
from accounts.sso.session import sso_shuts_out
from audit.models import ActorKind, AuditEntry
from billing.selectors import ledger_list
from chat.selectors import conversation_list, messages_sources_readable
from core.tenancy import account_context
from documents.models import Document, EmbeddingBatch, Status
from exports.errors import ExportRefused

FORMAT = "groundwork-export/1"
PENDING_STATUSES = (Status.PENDING, Status.PROCESSING)
SSO_REQUIRED = "sso_required"  # a `left_out` reason: the team requires SSO, the session did not use it
MIB = 1024 * 1024


@dataclass
class AccountPlan:
    account_id: int
    name: str
    slug: str
    role: str
    member_since: str
    pending: bytes = b""  # pending_ingestion.json, already serialized (it is measured)
    pending_records: int = 0
    file_bytes: int = 0


@dataclass
class Plan:
    accounts: list[AccountPlan] = field(default_factory=list)
    # The teams left out, and why: [{"id", "name", "reason"}] (the export's row keeps it).
    left_out: list[dict] = field(default_factory=list)

    @property
    def pending_records(self) -> int:
        return sum(a.pending_records for a in self.accounts)

    @property
    def pending_bytes(self) -> int:
        return sum(len(a.pending) for a in self.accounts)

    @property
    def file_bytes(self) -> int:
        return sum(a.file_bytes for a in self.accounts)


def _documents(account_id: int, user):
    """The person's uploads in the account, not being deleted (`visible()`)."""
    return Document.objects.for_account(account_id).visible().filter(uploaded_by=user)


def _exportable(account_id: int, user, *, by_sso: bool, left_out: list[dict]) -> bool:
    """Read again inside the account's context: a membership removed (or an account deleted)
    since the export started is not exported; a team that requires SSO, for an export a
    password session asked for, is not either, and is added to `left_out` (once)."""
    membership = (
        Membership.objects.for_account(account_id)
        .select_related("account")
        .filter(user=user, account__deleted_at__isnull=True)
        .first()
    )
    if membership is None:
        return False
    if sso_shuts_out(membership.account, by_sso=by_sso):
        if all(entry["id"] != account_id for entry in left_out):
            left_out.append({"id": account_id, "name": membership.account.name, "reason": SSO_REQUIRED})
        return False
    return True


def left_out_message(entry: dict) -> str:
    """What the export and its page say of a team left out."""
    return f"{entry['name']} requires single sign-on: sign in with SSO, then request a new export to include it."


def plan(*, user, by_sso: bool) -> Plan:
    """The accounts to export and their measured pending-ingestion data, or ExportRefused
    naming the limit a person exceeds and what to do about it. `by_sso`: the session that
    asked signed in with SSO (else the teams that require it are left out)."""
    result = Plan()
    for membership in membership_list_for_user(user=user):
        account = membership.account
        with account_context(account_id=account.pk):
            if not _exportable(account.pk, user, by_sso=by_sso, left_out=result.left_out):
                continue
            documents = _documents(account.pk, user)
            entry = AccountPlan(
                account_id=account.pk,
                name=account.name,
                slug=account.slug,
                role=membership.role,
                member_since=membership.created_at.isoformat(),
                file_bytes=documents.aggregate(total=Sum("size"))["total"] or 0,
            )
            pending_documents = documents.filter(status__in=PENDING_STATUSES)
            batches = EmbeddingBatch.objects.for_account(account.pk).filter(document__in=documents)
            entry.pending_records = pending_documents.count() + batches.count()
            result.accounts.append(entry)
            _check_records(result.pending_records)
            # Measured before it is loaded: the vectors are most of it (base64: 4/3).
            estimate = (batches.aggregate(total=Sum(Length("vectors")))["total"] or 0) * 4 // 3
            _check_bytes(result.pending_bytes + estimate)
            entry.pending = _pending_json(pending_documents, batches)
            _check_bytes(result.pending_bytes)
    if result.file_bytes > settings.EXPORT_MAX_FILE_BYTES:
        raise ExportRefused(
            "too_many_files",
            f"The documents you uploaded add up to {result.file_bytes / MIB:.1f} MiB; an export holds at most "
            f"{settings.EXPORT_MAX_FILE_BYTES / MIB:.0f} MiB of files. Delete documents you no longer need, "
            "then request a new export.",
        )
    return result


def _check_records(count: int) -> None:
    limit = settings.EXPORT_MAX_PENDING_RECORDS
    if count > limit:
        raise ExportRefused(
            "too_many_pending_records",
            f"Your documents still have more than {limit:,} records of ingestion in progress (an export holds at "
            f"most {limit:,}), so nothing was exported rather than a partial file. Wait for your documents to "
            "finish ingesting (the Knowledge base shows their progress), or delete documents that are still "
            "pending, then request a new export.",
        )


def _check_bytes(size: int) -> None:
    limit = settings.EXPORT_MAX_PENDING_BYTES
    if size > limit:
        raise ExportRefused(
            "too_much_pending_data",
            f"The ingestion still in progress for your documents is more than {limit / MIB:.0f} MiB of data (an "
            "export holds at most that much), so nothing was exported rather than a partial file. Wait for your "
            "documents to finish ingesting, or delete documents that are still pending, then request a new export.",
        )


def _pending_json(pending_documents, batches) -> bytes:
    body = {
        "documents": [
            {
                "id": d.pk,
                "name": d.name,
                "status": d.status,
                "revision": d.revision,
                "progress_done": d.progress_done,
                "progress_total": d.progress_total,
                "created_at": d.created_at.isoformat(),
            }
            for d in pending_documents.order_by("pk")
        ],
        "embedding_batches": [
            {
                "document_id": b.document_id,
                "revision": b.revision,
                "batch_index": b.batch_index,
                "count": b.count,
                "tokens": b.tokens,
                "model": b.model,
                "provider": b.provider,
                "created_at": b.created_at.isoformat(),
                "vectors_float32_base64": base64.b64encode(bytes(b.vectors)).decode(),
            }
            for b in batches.order_by("document_id", "revision", "batch_index").iterator(chunk_size=100)
        ],
    }
    return _dumps(body)


def _dumps(value) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=1).encode()


def _safe_name(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(name or "document")).strip("._") or "document"
    return stem[:120]


# --- packing -------------------------------------------------------------------------------


def write_zip(*, user, export_plan: Plan, by_sso: bool, out) -> list[int]:
    """Pack the planned accounts into the open binary file `out`; the ids of those written (a
    team that turned on "Members must sign in with SSO" since the plan joins `left_out`)."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        accounts = []
        for entry in export_plan.accounts:
            with account_context(account_id=entry.account_id):
                if not _exportable(entry.account_id, user, by_sso=by_sso, left_out=export_plan.left_out):
                    continue
                _write_account(zf, user, entry)
            accounts.append(
                {
                    "id": entry.account_id,
                    "name": entry.name,
                    "slug": entry.slug,
                    "role": entry.role,
                    "member_since": entry.member_since,
                    "folder": _folder(entry),
                }
            )
        zf.writestr(
            "export.json",
            _dumps(
                {
                    "format": FORMAT,
                    "created_at": timezone.now().isoformat(),
                    "person": {
                        "id": user.pk,
                        "email": user.email,
                        "full_name": user.full_name,
                        "date_joined": user.date_joined.isoformat(),
                    },
                    "accounts": accounts,
                    "left_out": [{**entry, "message": left_out_message(entry)} for entry in export_plan.left_out],
                }
            ),
        )
    return [a["id"] for a in accounts]


def _folder(entry: AccountPlan) -> str:
    return f"accounts/{entry.account_id}-{entry.slug}"


def _write_account(zf: zipfile.ZipFile, user, entry: AccountPlan) -> None:
    folder = _folder(entry)
    documents = []
    for document in _documents(entry.account_id, user).select_related("collection").order_by("pk"):
        file_name = ""
        if document.file and default_storage.exists(document.file.name):
            file_name = f"{folder}/files/{document.pk}-{_safe_name(document.name)}"
            with (
                default_storage.open(document.file.name, "rb") as source,
                zf.open(file_name, "w", force_zip64=True) as target,
            ):
                shutil.copyfileobj(source, target, 1024 * 1024)
        documents.append(_document_json(document, file_name))
    zf.writestr(f"{folder}/documents.json", _dumps(documents))
    zf.writestr(f"{folder}/pending_ingestion.json", entry.pending)
    zf.writestr(f"{folder}/conversations.json", _dumps(_conversations(entry.account_id, user)))
    zf.writestr(f"{folder}/usage.json", _dumps(_usage(entry.account_id, user)))
    zf.writestr(f"{folder}/audit.json", _dumps(_audit(entry.account_id, user)))


def _document_json(document: Document, file_name: str) -> dict:
    return {
        "id": document.pk,
        "name": document.name,
        "title": document.title,
        "kind": document.kind,
        "content_type": document.content_type,
        "size": document.size,
        "sha256": document.sha256,
        "file": file_name or None,
        "collection": {"id": document.collection_id, "name": document.collection.name},
        "status": document.status,
        "error": document.error,
        "revision": document.revision,
        "page_count": document.page_count,
        "chunk_count": document.chunk_count,
        "token_count": document.token_count,
        "credits_charged": document.credits_charged,
        "embedding_model": document.embedding_model,
        "created_at": document.created_at.isoformat(),
        "updated_at": document.updated_at.isoformat(),
        "chunks": [
            {
                "id": c.pk,
                "chunk_index": c.chunk_index,
                "revision": c.revision,
                "content": c.content,
                "token_count": c.token_count,
                "page_start": c.page_start,
                "page_end": c.page_end,
                "heading_path": c.heading_path,
                "text_source": c.text_source,
                "embedding_model": c.embedding_model,
            }
            for c in document.chunks.order_by("chunk_index", "pk")
            .only(
                "pk",
                "chunk_index",
                "revision",
                "content",
                "token_count",
                "page_start",
                "page_end",
                "heading_path",
                "text_source",
                "embedding_model",
            )
            .iterator(chunk_size=500)
        ],
    }


def _conversations(account_id: int, user) -> list[dict]:
    """The person's own conversations (not an API key's, not another member's). Their answers'
    citations are checked against what the person may read now, with the person as the
    principal: one naming a document since hidden from them (a restricted collection, access
    taken away) keeps its number and loses the name, as on the conversation's page."""
    found = []
    conversations = list(conversation_list(account=account_id, user=user).prefetch_related("messages"))
    with account_context(account_id=account_id, user=user):  # one query for every citation
        messages_sources_readable(account=account_id, messages=[m for c in conversations for m in c.messages.all()])
    for conversation in conversations:
        messages = conversation.messages.all()  # the prefetched objects, their citations checked
        found.append(
            {
                "id": conversation.pk,
                "title": conversation.title,
                "created_at": conversation.created_at.isoformat(),
                "updated_at": conversation.updated_at.isoformat(),
                "messages": [
                    {
                        "id": m.pk,
                        "role": m.role,
                        "content": m.content,
                        "status": m.status,
                        "citations": m.citations,
                        "model": m.model,
                        "total_tokens": m.total_tokens,
                        "credits_charged": m.credits_charged,
                        "created_at": m.created_at.isoformat(),
                    }
                    for m in sorted(messages, key=lambda m: (m.created_at, m.pk))
                ],
            }
        )
    return found


def _usage(account_id: int, user) -> list[dict]:
    """The credits the person spent (`spent_by_user`), oldest first. Not the account's
    balance: that is the account's, not the person's."""
    entries = ledger_list(account=account_id).filter(spent_by_user=user).order_by("created_at", "pk")
    return [
        {
            "id": e.pk,
            "created_at": e.created_at.isoformat(),
            "kind": e.kind,
            "delta": e.delta,
            "tokens": e.tokens,
            "model": e.model,
            "provider": e.provider,
            "reference": e.reference,
        }
        for e in entries.iterator(chunk_size=1000)
    ]


def _audit(account_id: int, user) -> list[dict]:
    entries = (
        AuditEntry.objects.for_account(account_id)
        .filter(Q(actor_kind=ActorKind.USER, actor_id=user.pk))
        .order_by("created_at", "pk")
    )
    return [
        {"at": e.created_at.isoformat(), "action": e.action, "target": e.target, "detail": e.detail}
        for e in entries.iterator(chunk_size=1000)
    ]
