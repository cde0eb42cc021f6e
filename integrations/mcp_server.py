"""The MCP server's tools (docs/api/mcp.md): `search`, `list_documents`, `fetch_document`, `ask`.

Each tool is the REST API's counterpart reached through the same services and selectors, with
the API key that `integrations.mcp_http` authenticated as the principal: the same permission
(accounts/permissions.py's table), the same per-account rate, the key's collections (row-level
security and the selectors read the key from the account context), its budget, and the same
answer shape and errors. A refusal is a tool error whose content is the REST error body
`{"error": {"code", "message"}}`, never a protocol crash.

The tools are async (the SDK calls them on the event loop); their bodies are the sync ORM and
model calls, run in a worker thread each with its database connection returned afterwards.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations

from accounts.models import ApiKey
from accounts.permissions import Action, principal_require
from audit.actors import acting_as, key_actor
from chat.driver import TurnRun
from chat.serializers import ChatRequestSerializer, ChatResponseSerializer
from core.api import account_rate_check, exception_handler
from core.tenancy import account_context
from documents import selectors as documents
from documents.serializers import DocumentSerializer
from integrations.serializers import DocumentListArguments
from retrieval.api import SearchRequestSerializer
from retrieval.explain import search_result
from retrieval.search import merge_overlap, search_for_query

logger = logging.getLogger("groundwork.mcp")

# Where integrations.mcp_http leaves the authenticated key in the ASGI scope for the tools.
API_KEY_SCOPE = "groundwork.api_key"

INSTRUCTIONS = (
    "Groundwork: your team's documents. `search` finds passages, `list_documents` and "
    "`fetch_document` read documents, `ask` answers a question from them with citations "
    "([Document N]) and costs credits like a chat message."
)

server = MCPServer(name="groundwork", title="Groundwork", instructions=INSTRUCTIONS)


def _api_key(ctx: Context) -> ApiKey:
    request = ctx.request_context.request
    key = request.scope.get(API_KEY_SCOPE) if request is not None else None
    if key is None:  # integrations.mcp_http answers 401 before any tool runs: never reached
        raise RuntimeError("an MCP tool was called without an authenticated API key")
    return key


def _result(payload: dict, *, is_error: bool = False) -> CallToolResult:
    text = json.dumps(payload, cls=DjangoJSONEncoder)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=json.loads(text), is_error=is_error
    )


def _serve(key: ApiKey, tool: str, action: Action, work: Callable[[], dict], *, transaction: bool = True):
    """Run one tool call as the key, the way a REST request runs: the key named as the actor
    for the audit log, the account's API rate, the table's permission for `action`, then `work`
    in the account context with the key as principal (one transaction, rolled back on error);
    `transaction=False` for a chat turn, which opens its own short contexts. Any failure is
    answered with the REST error body (core.api.exception_handler: one mapping for REST and MCP)."""
    close_old_connections()
    try:
        with acting_as(key_actor(key)):
            account_rate_check(account=key.account)
            principal_require(key, action)
            if transaction:
                with account_context(key.account, api_key=key):
                    payload = work()
            else:
                payload = work()
        logger.info("mcp %s: account %s key %s ok", tool, key.account_id, key.pk)
        return _result(payload)
    except Exception as exc:  # every failure is an answer (server_error for the unexpected, logged)
        body = exception_handler(exc, {}).data
        logger.info("mcp %s: account %s key %s refused: %s", tool, key.account_id, key.pk, body["error"]["code"])
        return _result(body, is_error=True)
    finally:
        close_old_connections()


async def _call(ctx: Context, tool: str, action: Action, work: Callable[[ApiKey], dict], **options):
    key = _api_key(ctx)
    run = sync_to_async(_serve, thread_sensitive=False)
    return await run(key, tool, action, lambda: work(key), **options)


def _valid(serializer_class, data: dict) -> dict:
    body = serializer_class(data={k: v for k, v in data.items() if v is not None})
    body.is_valid(raise_exception=True)
    return body.validated_data


# --- search ---------------------------------------------------------------------------------


def search_body(key: ApiKey, arguments: dict) -> dict:
    """POST /api/v1/search/'s answer: the query embedded and charged to the key, then searched
    in the collections it may see (and `tags` / `exclude_tags`, and never the account's
    excluded tags: retrieval's SQL)."""
    args = _valid(SearchRequestSerializer, arguments)
    collection_ids = documents.collection_ids_requested(account=key.account, requested=args.get("collection"))
    hits = search_for_query(
        account=key.account,
        query=args["query"],
        top_k=args.get("top_k"),
        key=f"search:{uuid.uuid4()}",
        api_key=key,
        collection_ids=collection_ids,
        tags=args.get("tags"),
        exclude_tags=args.get("exclude_tags"),
    )
    return {"results": [search_result(hit) for hit in hits]}


@server.tool(
    description="Search the team's documents (hybrid: meaning and words). Returns the best passages, "
    "each with document_id, document_name, chunk_index, pages, score and text. `top_k`: "
    "1-50 results; `tags`: only documents carrying any of them; `exclude_tags`: none "
    "carrying any of them. Costs the query's embedding credits."
)
async def search(
    ctx: Context,
    query: str,
    top_k: int | None = None,
    tags: list[str] | None = None,
    exclude_tags: list[str] | None = None,
    collection: int | list[int] | None = None,
) -> CallToolResult:
    arguments = {"query": query, "top_k": top_k, "tags": tags, "exclude_tags": exclude_tags, "collection": collection}
    return await _call(ctx, "search", Action.SEARCH, lambda key: search_body(key, arguments))


# --- documents ------------------------------------------------------------------------------


def list_documents_body(key: ApiKey, arguments: dict) -> dict:
    """GET /api/v1/documents/'s documents (newest first), a page at a time by offset."""
    args = _valid(DocumentListArguments, arguments)
    found = documents.document_list(account=key.account, status=args.get("status"), query=args.get("query") or None)
    page = list(found[args["offset"] : args["offset"] + args["limit"] + 1])
    more = len(page) > args["limit"]
    return {
        "results": DocumentSerializer(page[: args["limit"]], many=True).data,
        "next_offset": args["offset"] + args["limit"] if more else None,
    }


@server.tool(
    description="List the team's documents the key may read, newest first: id, name, status "
    "(pending, processing, ready, failed), size, chunk_count, created_at and more. "
    "`query` filters by name; `limit` (1-200, default 50) and `offset` page through them.",
    annotations=ToolAnnotations(read_only_hint=True),
)
async def list_documents(
    ctx: Context,
    query: str | None = None,
    status: str | None = None,
    limit: int | None = None,
    offset: int | None = None,
) -> CallToolResult:
    arguments = {"query": query, "status": status, "limit": limit, "offset": offset}
    return await _call(ctx, "list_documents", Action.DOCUMENT_READ, lambda key: list_documents_body(key, arguments))


def document_text(contents: Iterable[str]) -> str:
    """A document's text from its chunks in order, each overlap with the previous chunk said
    once (retrieval's merge_overlap, piece by piece so a long document is joined in linear time)."""
    pieces: list[str] = []
    previous = None
    for content in contents:
        if previous is None:
            pieces.append(content)
        else:
            merged = merge_overlap(previous, content)
            if merged.startswith(previous):
                pieces.append(merged[len(previous) :])
            else:  # no overlap: joined by a newline, the previous chunk's trailing space dropped
                pieces[-1] = pieces[-1].rstrip()
                pieces.append(merged[len(previous.rstrip()) :])
        previous = content
    return "".join(pieces)


def fetch_document_body(key: ApiKey, document_id) -> dict:
    """GET /api/v1/documents/{id}/'s document, with its whole text instead of chunk previews:
    not found alike for a missing id, another account's and one in a collection the key may
    not see. A document not yet ready has no text yet (its status says why)."""
    document = documents.document_access_by_id(account=key.account, document_id=document_id)
    chunks = documents.chunk_list(account=key.account, document=document).values_list("content", flat=True)
    return {**DocumentSerializer(document).data, "text": document_text(chunks.iterator())}


@server.tool(
    description="Read one document's whole text by its id (from search or list_documents), with its "
    "name, status and size.",
    annotations=ToolAnnotations(read_only_hint=True),
)
async def fetch_document(ctx: Context, document_id: int) -> CallToolResult:
    return await _call(ctx, "fetch_document", Action.DOCUMENT_READ, lambda key: fetch_document_body(key, document_id))


# --- ask ------------------------------------------------------------------------------------


def ask_body(key: ApiKey, question: str, arguments: dict) -> dict:
    """POST /api/v1/chat/'s answer: one turn through the chat driver (chat.driver.TurnRun), held,
    charged and stored like every chat turn; `conversation_id` continues one of this key's
    conversations (any other is not found); `tags` / `exclude_tags` steer its retrieval as they
    steer REST chat's."""
    args = _valid(ChatRequestSerializer, {"message": question, **arguments})
    run = TurnRun(
        account=key.account,
        api_key=key,
        question=args["message"],
        surface="mcp",
        conversation_id=args.get("conversation_id"),
        tags=args.get("tags"),
        exclude_tags=args.get("exclude_tags"),
    )
    return ChatResponseSerializer(run.run()).data


@server.tool(
    description="Ask a question about the team's documents. Returns the answer, its citations "
    "([Document N] -> document_id, document_name, chunk_index, pages), the usage and the "
    "credits left; pass conversation_id to ask a follow-up in the same conversation, "
    "`tags` to answer only from documents carrying any of them, `exclude_tags` from none "
    "carrying any of them. Costs credits like a chat message."
)
async def ask(
    ctx: Context,
    question: str,
    conversation_id: int | None = None,
    tags: list[str] | None = None,
    exclude_tags: list[str] | None = None,
) -> CallToolResult:
    arguments = {"conversation_id": conversation_id, "tags": tags, "exclude_tags": exclude_tags}
    return await _call(ctx, "ask", Action.CHAT, lambda key: ask_body(key, question, arguments), transaction=False)
