"""Tags on documents, and the account's excluded tags: the rules a tag obeys, and the writes.

A tag is 1-40 characters after trimming, without control characters or commas (a comma
separates tags in the upload form), and a document has at most 20; tags are unique
case-insensitively (the first spelling is kept). The same rules hold for the tags a search
or a chat turn asks for (`tags`, `exclude_tags`) and for the account's `exclude_tags`.

Retrieval compares tags lower-cased (documents.models.RETRIEVABLE_BY_TAGS_SQL): "Draft" on a
document is excluded by "draft" in the account's setting.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from core.text import has_control_characters
from documents.error_codes import DocumentErrorCode
from documents.errors import TagsInvalid
from documents.models import Document, RetrievalSettings

MAX_TAGS = 20
MAX_TAG_CHARS = 40


def tags_clean(value, *, field: str = "tags") -> list[str]:
    """`value` (a list of strings, or None for none) as tags: trimmed, unique
    case-insensitively in their first order. TagsInvalid (400, naming `field`) for anything
    else: not a list, a tag that is not a string, empty, too long, with a control character
    or a comma, or more than MAX_TAGS of them."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise _invalid(field, f'`{field}` must be a list of strings, e.g. ["policy", "2026"].')
    tags, seen = [], set()
    for item in value:
        if not isinstance(item, str):
            raise _invalid(field, f"Each of `{field}` must be a string.")
        tag = item.strip()
        if not tag:
            raise _invalid(field, "A tag cannot be empty.")
        if has_control_characters(tag):
            raise _invalid(field, "A tag cannot contain line breaks, tabs or other control characters.")
        if "," in tag:
            raise _invalid(field, f"A tag cannot contain a comma (commas separate tags): {tag[:MAX_TAG_CHARS]!r}.")
        if len(tag) > MAX_TAG_CHARS:
            raise _invalid(field, f"A tag is at most {MAX_TAG_CHARS} characters: {tag[:MAX_TAG_CHARS]!r}… is longer.")
        if tag.lower() not in seen:
            seen.add(tag.lower())
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        raise _invalid(field, f"At most {MAX_TAGS} tags, not {len(tags)}.")
    return tags


def tags_from_form(values) -> list[str]:
    """Tags from a form or multipart field (`tags`), given comma-separated, repeated or
    both: "policy, hr" and tags=policy&tags=hr are the same. Blank pieces are skipped."""
    pieces = [piece for value in values or [] for piece in str(value).split(",")]
    return tags_clean([piece for piece in pieces if piece.strip()])


def tags_filter(value, *, field: str) -> list[str] | None:
    """A retrieval's `tags` or `exclude_tags` from a request (tags_clean's rules), lower-cased
    for RETRIEVABLE_BY_TAGS_SQL; None when none were given (no narrowing)."""
    tags = tags_clean(value, field=field)
    return [tag.lower() for tag in tags] or None


def tags_excluded(tags, exclude_tags) -> bool:
    """Whether a document carrying `tags` is left out by `exclude_tags` (compared as
    RETRIEVABLE_BY_TAGS_SQL compares them): what the Knowledge base shows as "excluded from
    answers"."""
    excluded = {tag.lower() for tag in exclude_tags or []}
    return any(tag.lower() in excluded for tag in tags or [])


def _invalid(field: str, message: str) -> TagsInvalid:
    return TagsInvalid(DocumentErrorCode.INVALID_TAGS, message, field=field)


@transaction.atomic
def document_tags_set(*, account, actor, document: Document, tags) -> Document:
    """Replace `document`'s tags with `tags` (tags_clean's rules: TagsInvalid with nothing
    written). A change is audited with the tags before and after; the same tags again write
    nothing. Permission is the caller's to check (Action.DOCUMENT_TAG)."""
    cleaned = tags_clean(tags)
    document = Document.objects.for_account(account).select_for_update().get(pk=document.pk)
    if cleaned == list(document.tags):
        return document
    before = list(document.tags)
    document.tags, document.updated_at = cleaned, timezone.now()
    document.save(update_fields=["tags", "updated_at"])
    audit_record(
        account=account,
        action="document.tags",
        actor=actor,
        target=f"{document.name} (document {document.pk})",
        detail={"from": before, "to": cleaned},
    )
    return document


def retrieval_exclude_tags(*, account) -> list[str]:
    """The account's excluded tags (none until set)."""
    found = RetrievalSettings.objects.for_account(account).values_list("exclude_tags", flat=True).first()
    return list(found or [])


@transaction.atomic
def retrieval_exclude_tags_set(*, account, actor, exclude_tags) -> list[str]:
    """Make the account's excluded tags exactly `exclude_tags` (tags_clean's rules): documents
    carrying any of them are never retrieved, on any surface, from the next retrieval on.
    Audited when changed. Permission is the caller's to check (Action.RETRIEVAL_SETTINGS)."""
    cleaned = tags_clean(exclude_tags, field="exclude_tags")
    account_id = getattr(account, "pk", account)
    row = RetrievalSettings.objects.for_account(account).select_for_update().first()
    if row is None:
        try:
            with transaction.atomic():
                row = RetrievalSettings.objects.for_account(account).create(account_id=account_id)
        except IntegrityError:  # NOTE: two first settings at once: the unique account keeps one
            row = RetrievalSettings.objects.for_account(account).select_for_update().get()
    if cleaned == list(row.exclude_tags):
        return cleaned
    before = list(row.exclude_tags)
    row.exclude_tags = cleaned
    row.save(update_fields=["exclude_tags", "updated_at"])
    audit_record(
        account=account,
        action="retrieval.exclude_tags",
        actor=actor,
        target="retrieval settings",
        detail={"from": before, "to": cleaned},
    )
    return cleaned
