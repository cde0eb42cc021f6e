"""REST chat: `POST /api/v1/chat/` (JSON, or server-sent events with ?stream=1) and the
conversation history."""
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import Action, allows
from chat import selectors
from chat.agent import TurnOptions
from chat.driver import TurnRun, sse
from chat.serializers import (
    ChatRequestSerializer,
    ChatResponseSerializer,
    ConversationDetailSerializer,
    ConversationSerializer,
)
from core.api import CursorPagination, EventStreamRenderer, streaming_response, wants_event_stream
from core.permissions import HasAccount

CHAT_PERMISSIONS = [HasAccount, allows(Action.CHAT)]


BIGINT_MAX = 2**63 - 1


class _ChatRequest(ChatRequestSerializer):
    """ChatRequestSerializer, with an id that fits the database (a larger one is a 400, not a
    database error)."""

    conversation_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=BIGINT_MAX)


def _actor(request):
    user = request.user if getattr(request.user, "is_authenticated", False) else None
    return user, request._request.api_key


class ChatView(APIView):
    # Each step of a turn opens its own account context; no transaction spans the model call.
    account_transaction = False
    renderer_classes = [JSONRenderer, EventStreamRenderer]
    permission_classes = CHAT_PERMISSIONS

    @extend_schema(request=ChatRequestSerializer, responses=ChatResponseSerializer,
                   parameters=[OpenApiParameter("stream", int, enum=[0, 1], required=False,
                                                description="1: server-sent events (sources, token…, done)")])
    def post(self, request):
        body = _ChatRequest(data=request.data)
        body.is_valid(raise_exception=True)
        user, api_key = _actor(request)
        run = TurnRun(account=request._request.account, user=user, api_key=api_key,
                      question=body.validated_data["message"],
                      conversation_id=body.validated_data.get("conversation_id"),
                      options=TurnOptions(collection=body.validated_data.get("collection")))
        run.prepare()
        if request.query_params.get("stream") in ("1", "true") or wants_event_stream(request):
            return streaming_response(run.http_events(request._request, lambda frame: (sse(frame),)))
        done = run.run()
        return Response({k: done[k] for k in ("conversation_id", "message_id", "answer", "citations", "usage",
                                              "credits_remaining")})


class ConversationPagination(CursorPagination):
    ordering = ("-updated_at", "-pk")


class ConversationListView(APIView):
    permission_classes = CHAT_PERMISSIONS

    @extend_schema(responses=ConversationSerializer(many=True),
                   parameters=[OpenApiParameter("cursor", str, required=False),
                               OpenApiParameter("page_size", int, required=False)])
    def get(self, request):
        paginator = ConversationPagination()
        user, api_key = _actor(request)
        conversations = selectors.conversation_list(account=request._request.account, user=user, api_key=api_key)
        page = paginator.paginate_queryset(conversations, request, view=self)
        return paginator.get_paginated_response(ConversationSerializer(page, many=True).data)


class ConversationDetailView(APIView):
    permission_classes = CHAT_PERMISSIONS

    @extend_schema(responses=ConversationDetailSerializer)
    def get(self, request, conversation_id: int):
        account = request._request.account
        user, api_key = _actor(request)
        conversation = selectors.conversation_get(account=account, conversation_id=conversation_id, user=user,
                                                  api_key=api_key)
        if conversation is None:
            raise Http404
        messages = selectors.messages_sources_readable(
            account=account, messages=selectors.message_list(account=account, conversation=conversation))
        return Response(ConversationDetailSerializer(conversation, context={"messages": messages}).data)
