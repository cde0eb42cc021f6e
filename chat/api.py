"""REST chat: `POST /api/v1/chat/` (JSON, or server-sent events with ?stream=1), the
conversation history, and feedback on answers."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from accounts.permissions import Action, allows
from chat import selectors, services
from chat.agent import TurnOptions
from chat.driver import TurnRun, sse
from chat.error_codes import ChatErrorCode
from chat.errors import FeedbackError
from chat.models import Rating
from chat.serializers import (
    ChatRequestSerializer,
    ChatResponseSerializer,
    ConversationDetailSerializer,
    ConversationRenameSerializer,
    ConversationSerializer,
    FeedbackRequestSerializer,
    FeedbackSerializer,
    RegenerateRequestSerializer,
)
from core.api import CursorPagination, EventStreamRenderer, streaming_response, wants_event_stream
from core.views import AccountAPIView

BIGINT_MAX = 2**63 - 1


class _ChatRequest(ChatRequestSerializer):
    """ChatRequestSerializer, with an id that fits the database (a larger one is a 400, not a
    database error)."""

    conversation_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=BIGINT_MAX)


class ChatAPIView(AccountAPIView):
    """Asking, and reading one's own conversations: `chat` (every role and key scope)."""

    permission_classes = [allows(Action.CHAT)]


def _answered(request, run: TurnRun):
    """A REST turn's reply (POST chat/ and regenerate/): server-sent events with ?stream=1 or
    Accept: text/event-stream, else the done frame's public fields as JSON."""
    run.prepare()
    if request.query_params.get("stream") in ("1", "true") or wants_event_stream(request):
        return streaming_response(run.http_events(request._request, lambda frame: (sse(frame),)))
    done = run.run()
    return Response(
        {k: done[k] for k in ("conversation_id", "message_id", "answer", "citations", "usage", "credits_remaining")}
    )


class ChatView(ChatAPIView):
    # Each step of a turn opens its own account context; no transaction spans the model call.
    account_transaction = False
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        request=ChatRequestSerializer,
        responses=ChatResponseSerializer,
        parameters=[
            OpenApiParameter(
                "stream", int, enum=[0, 1], required=False, description="1: server-sent events (sources, token…, done)"
            )
        ],
    )
    def post(self, request):
        body = _ChatRequest(data=request.data)
        body.is_valid(raise_exception=True)
        run = TurnRun(
            account=self.account,
            user=self.user,
            api_key=self.api_key,
            surface="api",
            question=body.validated_data["message"],
            conversation_id=body.validated_data.get("conversation_id"),
            options=TurnOptions(
                collection=body.validated_data.get("collection"),
                tags=body.validated_data.get("tags"),
                exclude_tags=body.validated_data.get("exclude_tags"),
            ),
        )
        return _answered(request, run)


class ConversationPagination(CursorPagination):
    ordering = ("-updated_at", "-pk")


class ConversationListView(ChatAPIView):
    @extend_schema(
        responses=ConversationSerializer(many=True),
        parameters=[
            OpenApiParameter("cursor", str, required=False),
            OpenApiParameter("page_size", int, required=False),
            OpenApiParameter(
                "q",
                str,
                required=False,
                description="Only conversations whose title or messages contain "
                "this text (case-insensitive, 1-200 characters)",
            ),
        ],
    )
    def get(self, request):
        q = selectors.conversation_search_text(request.query_params.get("q"))
        paginator = ConversationPagination()
        conversations = selectors.conversation_list(account=self.account, user=self.user, api_key=self.api_key, q=q)
        page = paginator.paginate_queryset(conversations, request, view=self)
        return paginator.get_paginated_response(ConversationSerializer(page, many=True).data)


class ConversationDetailView(ChatAPIView):
    @extend_schema(responses=ConversationDetailSerializer)
    def get(self, request, conversation_id: int):
        account = self.account
        conversation = selectors.conversation_access_by_id(
            account=account, conversation_id=conversation_id, user=self.user, api_key=self.api_key
        )
        messages = selectors.messages_sources_readable(
            account=account, messages=selectors.message_list(account=account, conversation=conversation)
        )
        return Response(ConversationDetailSerializer(conversation, context={"messages": messages}).data)

    @extend_schema(request=ConversationRenameSerializer, responses=ConversationSerializer)
    def patch(self, request, conversation_id: int):
        body = request.data if isinstance(request.data, dict) else {}
        conversation = services.conversation_rename(
            account=self.account,
            conversation_id=conversation_id,
            title=body.get("title"),
            user=self.user,
            api_key=self.api_key,
        )
        conversation = selectors.conversation_list(account=self.account, user=self.user, api_key=self.api_key).get(
            pk=conversation.pk
        )
        return Response(ConversationSerializer(conversation).data)

    @extend_schema(responses={204: None})
    def delete(self, request, conversation_id: int):
        services.conversation_delete(
            account=self.account, conversation_id=conversation_id, user=self.user, api_key=self.api_key
        )
        return Response(status=204)


class ConversationRegenerateView(ChatAPIView):
    """`POST conversations/{id}/regenerate/`: the conversation's last question asked again, a
    new turn through the one driver (charged like any); the answer it had stays as a
    previous version. JSON like `POST chat/`, or server-sent events with ?stream=1."""

    account_transaction = False
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        request=RegenerateRequestSerializer,
        responses=ChatResponseSerializer,
        parameters=[
            OpenApiParameter(
                "stream", int, enum=[0, 1], required=False, description="1: server-sent events (sources, token…, done)"
            )
        ],
    )
    def post(self, request, conversation_id: int):
        body = RegenerateRequestSerializer(data=request.data if isinstance(request.data, dict) else {})
        body.is_valid(raise_exception=True)
        run = TurnRun(
            account=self.account,
            user=self.user,
            api_key=self.api_key,
            question=None,
            conversation_id=conversation_id,
            regenerate=True,
            options=TurnOptions(
                collection=body.validated_data.get("collection"),
                tags=body.validated_data.get("tags"),
                exclude_tags=body.validated_data.get("exclude_tags"),
            ),
        )
        return _answered(request, run)


class FeedbackView(ChatAPIView):
    """`POST messages/{id}/feedback/`: whoever may chat rates an answer of their own
    conversations (one per person or key and message; a second replaces the first)."""

    @extend_schema(request=FeedbackRequestSerializer, responses={201: FeedbackSerializer})
    def post(self, request, message_id: int):
        body = request.data if isinstance(request.data, dict) else {}
        feedback = services.feedback_give(
            account=self.account,
            message_id=message_id,
            user=self.user,
            api_key=self.api_key,
            rating=body.get("rating"),
            comment=body.get("comment"),
        )
        feedback = selectors.feedback_list(account=self.account).get(pk=feedback.pk)
        return Response(FeedbackSerializer(feedback).data, status=201)


class FeedbackPagination(CursorPagination):
    ordering = ("-created_at", "-pk")


class FeedbackListView(AccountAPIView):
    """`GET feedback/`: every feedback of the account, for owners and admins."""

    permission_classes = [allows(Action.FEEDBACK_VIEW)]

    @extend_schema(
        responses=FeedbackSerializer(many=True),
        parameters=[
            OpenApiParameter("cursor", str, required=False),
            OpenApiParameter("page_size", int, required=False),
            OpenApiParameter("rating", str, enum=["up", "down"], required=False),
        ],
    )
    def get(self, request):
        rating = request.query_params.get("rating") or None
        if rating is not None and rating not in Rating.values:
            raise FeedbackError(ChatErrorCode.INVALID_RATING, 'rating must be "up" or "down".', field="rating")
        paginator = FeedbackPagination()
        page = paginator.paginate_queryset(
            selectors.feedback_list(account=self.account, rating=rating), request, view=self
        )
        selectors.messages_sources_readable(account=self.account, messages=[f.message for f in page])
        return paginator.get_paginated_response(FeedbackSerializer(page, many=True).data)
