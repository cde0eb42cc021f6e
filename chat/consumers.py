"""The chat websocket, /ws/chat/ (docs/api/websocket.md). Thin: authenticate the handshake, run each
message's turn through the one driver (`chat.driver.TurnRun`) and send its frames.

What closes a socket (docs/api/websocket.md, "The rules"): 4401 unauthenticated, also when the key is revoked or
the member removed while it is open (a notice to the principal's channel group, and a
re-check of the principal before every message); 4403 an Origin that is not the site's own
(scheme, host and port) on a session handshake, or a role that may not chat; 4429 too many
open sockets for one principal (WS_MAX_SOCKETS_PER_PRINCIPAL) or frames faster than
WS_FRAMES_PER_SECOND (burst WS_FRAME_BURST). A bad frame never closes it: it gets a
chat.error (bad_request, too_large) and the socket stays open.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host

from accounts.models import Account, ApiKey, Membership
from accounts.permissions import Action, principal_may, refusal_message
from accounts.profile.selectors import session_is_signed_in
from accounts.resolution import bearer_token, resolve_api_key, resolve_session
from accounts.sso.session import session_passes_sso, sso_required_message, sso_shuts_out
from chat.agent import TurnOptions
from chat.driver import TurnRun
from chat.error_codes import ChatErrorCode
from chat.errors import ChatError
from core import rows, sockets
from core.error_codes import CoreErrorCode
from core.errors import GroundworkError, error_frame
from core.request_id import request_id_from, request_id_set
from core.tenancy import account_context

logger = logging.getLogger("groundwork.chat")

UNAUTHENTICATED = 4401
FORBIDDEN = 4403
FORBIDDEN_ORIGIN = FORBIDDEN
TOO_MANY = 4429
CLOSE_CODES = {"unauthenticated": UNAUTHENTICATED, "forbidden": FORBIDDEN, "permission_denied": FORBIDDEN}
BIGINT_MAX = 2**63 - 1


def _in_thread(func):
    """Run ORM work in a worker thread of its own (not the single shared one), so one slow
    socket does not queue every other socket's database work behind it."""

    def call(*args, **kwargs):
        close_old_connections()
        try:
            return func(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(call, thread_sensitive=False)


def handshake_header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


# --- the Origin of a session handshake --------------------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin such as "https://app.example.com", or None when it
    is not an http(s) origin (a path, credentials, "null", …)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host or parts.username or parts.password or parts.path not in ("", "/"):
        return None
    return scheme, host, port or _DEFAULT_PORTS[scheme]


def _trusted(origin: tuple[str, str, int], pattern: str) -> bool:
    """An entry of CSRF_TRUSTED_ORIGINS / WS_ALLOWED_ORIGINS: an exact origin, or
    "https://*.example.com" for its subdomains (Django's CSRF rule), same scheme and port."""
    wildcard = "://*." in pattern
    allowed = _origin(pattern.replace("://*.", "://", 1) if wildcard else pattern)
    if allowed is None:
        return False
    scheme, host, port = allowed
    if (origin[0], origin[2]) != (scheme, port):
        return False
    return origin[1].endswith("." + host) if wildcard else origin[1] == host


def _own_origin(scope) -> tuple[str, str, int] | None:
    """The origin the page was served from: the handshake's Host (if the site serves it)
    with the scheme the browser used (wss: https; a TLS proxy says so in the header named
    by SECURE_PROXY_SSL_HEADER)."""
    host = handshake_header(scope, b"host")
    if not host:
        return None
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") == "wss"
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        header, value = proxy
        name = header.removeprefix("HTTP_").replace("_", "-").lower().encode()
        forwarded = handshake_header(scope, name)
        if forwarded is not None:
            secure = forwarded.split(",")[0].strip() == value
    return _origin(f"{'https' if secure else 'http'}://{host}")


def origin_allowed(scope) -> bool:
    """Cross-site websocket hijacking: a session cookie alone does not prove the page is
    ours. The Origin must be the site's own, or a trusted one, by scheme, host and port."""
    origin = _origin(handshake_header(scope, b"origin") or "")
    if origin is None:
        return False
    if origin == _own_origin(scope):
        return True
    return any(_trusted(origin, o) for o in (*settings.CSRF_TRUSTED_ORIGINS, *settings.WS_ALLOWED_ORIGINS))


_origin_allowed = origin_allowed  # the old name


# --- who is on the socket ---------------------------------------------------------------------


@dataclass
class Principal:
    """An API key, or a member: a person in one account. A key is never its creator."""

    account: Account
    api_key: ApiKey | None = None
    user: object = None
    membership: Membership | None = None
    # How the session signed in (accounts/sso/session.py): an account that requires single
    # sign-on is no access to a member whose session signed in with a password.
    signed_in_with_sso: bool = False
    session_key: str | None = None  # a member's socket: the session it was opened with

    @property
    def name(self) -> str:
        """Its channel group, also the name its open sockets are counted under."""
        if self.api_key is not None:
            return sockets.key_group(self.api_key.pk)
        return sockets.member_group(self.account.pk, self.user.pk)

    @property
    def groups(self) -> list[str]:
        return [self.name, sockets.account_group(self.account.pk)]


def _may_chat(principal) -> bool:
    """The role or key scope may chat (accounts/permissions.py; today every one may)."""
    return principal_may(principal, Action.CHAT)


def principal_refusal(principal: Principal) -> GroundworkError | None:
    """Whether the principal may still chat: None, or the error that says why not. Read
    fresh from the database (a revoked key, a removed member, a deleted account, a role
    that may no longer chat)."""
    with account_context(principal.account):
        return principal_refusal_here(principal)


def principal_refusal_here(principal: Principal) -> GroundworkError | None:
    """principal_refusal() inside the caller's context of the principal's account (a turn's
    first transaction): one query, the key or the membership joined with its account."""
    gone = ChatError(
        ChatErrorCode.UNAUTHENTICATED,
        "Your access has ended: the API key was revoked or you are no longer a member of this account. Sign in again.",
        status=401,
    )
    if principal.api_key is not None:
        key = rows.select_one(
            ApiKey,
            "JOIN accounts_account a ON a.id = t.account_id WHERE t.id = %s AND "
            "t.account_id = %s AND t.revoked_at IS NULL AND a.deleted_at IS NULL",
            [principal.api_key.pk, principal.account.pk],
        )
        if key is None:
            return gone
        principal.api_key = key
        return (
            None
            if _may_chat(key)
            else ChatError(CoreErrorCode.FORBIDDEN, refusal_message(key, Action.CHAT), status=403)
        )
    membership = (
        Membership.objects.for_account(principal.account)
        .select_related("user", "account")
        .filter(user_id=principal.user.pk, account__deleted_at__isnull=True)
        .first()
    )
    if membership is None or not membership.user.is_active:
        return gone
    if sso_shuts_out(membership.account, by_sso=principal.signed_in_with_sso):
        return ChatError(ChatErrorCode.UNAUTHENTICATED, sso_required_message(membership.account), status=401)
    principal.membership = membership
    if not _may_chat(membership):
        return ChatError(CoreErrorCode.FORBIDDEN, refusal_message(membership, Action.CHAT), status=403)
    return None


class _SocketTurn(TurnRun):
    """A turn that re-checks its principal right before it routes, retrieves or holds
    credits, in the turn's first transaction: a key revoked (or a member removed) a moment
    ago is refused even if the notice has not reached the socket yet."""

    def __init__(self, *, principal: Principal, **kwargs):
        super().__init__(authorize=lambda: self._authorize(principal), surface="websocket", **kwargs)
        self.principal = principal

    @staticmethod
    def _authorize(principal: Principal) -> None:
        refusal = principal_refusal_here(principal)
        if refusal is not None:
            raise refusal


# --- frames -----------------------------------------------------------------------------------


def _frame_error(text_data) -> tuple[dict | None, ChatError | None]:
    """The frame as a JSON object, or the chat.error it gets."""
    if text_data is None:
        return None, ChatError(CoreErrorCode.BAD_REQUEST, "Send JSON text frames, not binary ones.")
    if (
        len(text_data) > settings.WS_MAX_FRAME_BYTES
        or len(text_data.encode("utf-8", "replace")) > settings.WS_MAX_FRAME_BYTES
    ):
        return None, ChatError(
            CoreErrorCode.TOO_LARGE, f"Frames are limited to {settings.WS_MAX_FRAME_BYTES:,} bytes.", status=413
        )
    try:
        content = json.loads(text_data, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # not JSON, NaN/Infinity, or nested past the parser's depth
        return None, ChatError(CoreErrorCode.BAD_REQUEST, "That frame is not valid JSON.")
    if not isinstance(content, dict):
        return None, ChatError(
            CoreErrorCode.BAD_REQUEST, 'A frame is a JSON object: {"type": "chat.message", "message": "…"}.'
        )
    return content, None


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _message_error(content: dict) -> ChatError | None:
    message, conversation_id = content.get("message"), content.get("conversation_id")
    if message is not None and not isinstance(message, str):
        return ChatError(CoreErrorCode.BAD_REQUEST, "`message` is the question, as text.")
    if isinstance(message, str) and "\x00" in message:
        return ChatError(
            CoreErrorCode.BAD_REQUEST, "The question contains a NUL character; remove it and send it again."
        )
    if conversation_id is None or conversation_id == "":
        return None
    if isinstance(conversation_id, str) and conversation_id.isascii() and conversation_id.isdigit():
        conversation_id = int(conversation_id)
    if (
        isinstance(conversation_id, bool)
        or not isinstance(conversation_id, int)
        or not 1 <= conversation_id <= BIGINT_MAX
    ):
        return ChatError(
            CoreErrorCode.BAD_REQUEST,
            "`conversation_id` is the id of one of your conversations (a whole "
            "number); leave it out to start a new one.",
        )
    return None


def _regenerate_error(content: dict) -> ChatError | None:
    if content.get("conversation_id") in (None, ""):
        return ChatError(
            CoreErrorCode.BAD_REQUEST,
            "`conversation_id` says which conversation's last answer to "
            'regenerate: {"type": "chat.regenerate", "conversation_id": 12}.',
        )
    return None


class ChatConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        self.generation: asyncio.Task | None = None
        self.run: TurnRun | None = None
        self.principal: Principal | None = None
        self.lease: sockets.SocketLease | None = None
        self.closing = False
        self.frames = sockets.FrameBucket(settings.WS_FRAMES_PER_SECOND, settings.WS_FRAME_BURST)
        # Each turn's log lines (and the jobs it enqueues) carry "<socket's id>:<turn number>".
        self.request_id = request_id_from(handshake_header(self.scope, b"x-request-id"))
        self.turns = 0
        token = bearer_token(handshake_header(self.scope, b"authorization"))
        if token is not None:
            resolution = await _in_thread(resolve_api_key)(token)
        else:
            resolution = await _in_thread(resolve_session)(self.scope.get("user"), self.scope.get("session"))
            if resolution.account is not None and not origin_allowed(self.scope):
                await self._refuse(FORBIDDEN_ORIGIN)
                return
        if resolution.account is None:
            await self._refuse(UNAUTHENTICATED)
            return
        # An API key is not the person who made it: it chats as itself, in its own conversations.
        principal = Principal(
            account=resolution.account,
            api_key=resolution.api_key,
            user=None if token is not None else resolution.user,
            membership=None if token is not None else resolution.membership,
            signed_in_with_sso=token is None
            and session_passes_sso(user=resolution.user, account=resolution.account, session=self.scope.get("session")),
            session_key=None if token is not None else getattr(self.scope.get("session"), "session_key", None),
        )
        if not _may_chat(principal):
            await self._refuse(FORBIDDEN)
            return
        lease = sockets.SocketLease(principal.name, self.channel_name)
        if not await lease.acquire(settings.WS_MAX_SOCKETS_PER_PRINCIPAL):
            await self._refuse(TOO_MANY)
            return
        self.principal, self.lease = principal, lease
        self.groups = list(principal.groups)
        for group in self.groups:
            await self.channel_layer.group_add(group, self.channel_name)
        # Access taken away between the lookup and joining the groups sent its notice to nobody.
        refusal = await _in_thread(principal_refusal)(principal)
        if refusal is not None:
            await self._refuse(CLOSE_CODES.get(refusal.code, UNAUTHENTICATED))
            return
        await self.accept()

    async def _refuse(self, code: int):
        """Accept, then close with the contract's code (a close before accept would reach the
        client as an HTTP 403 with no code)."""
        await self.accept()
        await self._shut(code)

    async def _shut(self, code: int):
        if self.closing:
            return
        self.closing = True
        if self._answering():
            self.run.cancel()  # the turn stops and settles in its thread; nothing more is sent
        if self.lease is not None:
            await self.lease.release()
        await self.close(code=code)

    async def disconnect(self, code):
        self.closing = True
        if self.lease is not None:
            await self.lease.release()
        if self.generation and not self.generation.done():
            self.run.cancel()
            # Let the turn settle its credits; the socket is gone, so no frames are sent.
            await asyncio.shield(self.generation)

    # Notices to the principal's groups (core/sockets.py).

    async def principal_revoked(self, event):
        await self._shut(UNAUTHENTICATED)

    async def conversation_deleted(self, event):
        """One of the principal's conversations was deleted (chat.services.conversation_delete):
        a turn in it stops, and the page is told so it closes it. The socket stays open."""
        if self.principal is None or self.closing:
            return
        conversation_id = event.get("conversation_id")
        turn = self.run.turn if self.run is not None else None
        if self._answering() and turn is not None and turn.conversation.pk == conversation_id:
            self.run.cancel()
        await self.send_json({"type": "conversation.deleted", "conversation_id": conversation_id})

    async def principal_changed(self, event):
        if self.principal is None or self.closing:
            return
        refusal = await _in_thread(principal_refusal)(self.principal)
        if refusal is not None:
            await self._shut(CLOSE_CODES.get(refusal.code, UNAUTHENTICATED))
            return
        # A new password or "Sign out other sessions" (accounts/profile/) ends the sessions
        # that no longer match: their sockets close; the session that made the change stays.
        principal = self.principal
        if principal.session_key is not None and not await _in_thread(session_is_signed_in)(
            user_id=principal.user.pk, session_key=principal.session_key
        ):
            await self._shut(UNAUTHENTICATED)

    # Frames from the client.

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        if self.closing or self.principal is None:
            return
        if not self.frames.take():
            await self._error(
                ChatError(
                    CoreErrorCode.RATE_LIMITED,
                    f"Too many frames: at most {settings.WS_FRAMES_PER_SECOND:g} a second. Reconnect and slow down.",
                    status=429,
                )
            )
            await self._shut(TOO_MANY)
            return
        content, error = _frame_error(text_data)
        if error is not None:
            await self._error(error)
            return
        await self.receive_json(content)

    async def receive_json(self, content, **kwargs):
        kind = content.get("type")
        if kind == "chat.cancel":
            if self._answering():
                self.run.cancel()  # also while the turn is still being prepared
            return
        if kind not in ("chat.message", "chat.regenerate"):
            await self._error(
                ChatError(
                    CoreErrorCode.BAD_REQUEST,
                    'Send {"type": "chat.message", "message": "…"}, '
                    '{"type": "chat.regenerate", "conversation_id": …} '
                    'or {"type": "chat.cancel"}.',
                )
            )
            return
        if self._answering():
            await self._error(
                ChatError(
                    CoreErrorCode.BAD_REQUEST,
                    "An answer is still being written: wait for it, or send chat.cancel first.",
                )
            )
            return
        regenerate = kind == "chat.regenerate"
        error = _message_error(content) or (_regenerate_error(content) if regenerate else None)
        if error is not None:
            await self._error(error)
            return
        principal = self.principal
        self.turns += 1
        # The turn (its thread) and the relay task (a copy of this context) log with this id.
        with request_id_set(f"{self.request_id}:{self.turns}"):
            self.run = _SocketTurn(
                principal=principal,
                account=principal.account,
                user=principal.user,
                api_key=principal.api_key,
                question=None if regenerate else content.get("message"),
                conversation_id=content.get("conversation_id"),
                regenerate=regenerate,
                options=TurnOptions(
                    collection=content.get("collection"),
                    tags=content.get("tags"),
                    exclude_tags=content.get("exclude_tags"),
                ),
            )
            self.generation = asyncio.create_task(self._relay(self.run))

    async def _error(self, error: ChatError):
        await self.send_json(error_frame(error))

    def _answering(self) -> bool:
        """A turn is under way until its chat.done or chat.error is out (its task may still
        be tidying up its thread after that; the turn is settled by then)."""
        return (
            self.run is not None
            and self.run.done is None
            and self.run.error is None
            and (self.generation is not None and not self.generation.done())
        )

    async def _relay(self, run: TurnRun):
        async for frame in run.aframes():
            if self.closing:
                run.cancel()
                continue
            try:
                await self.send_json(frame)
            except Exception:  # the socket closed under us; the turn still settles
                logger.info("chat socket closed during turn %s", run.id)
                run.cancel()
        if run.error is not None and run.error.code in CLOSE_CODES:
            await self._shut(CLOSE_CODES[run.error.code])
