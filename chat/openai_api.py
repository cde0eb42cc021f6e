"""The OpenAI-compatible surface: any OpenAI SDK pointed at `base_url="http://HOST/v1"` with
an API key chats with its account's knowledge base as model "groundwork"."""

from __future__ import annotations

import time

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from accounts.permissions import Action, allows
from chat.agent import TurnOptions
from chat.driver import TurnRun, sse
from chat.error_codes import ChatErrorCode
from chat.errors import ChatError
from core.api import EventStreamRenderer, streaming_response
from core.authentication import ApiKeyAuthentication
from core.error_codes import CoreErrorCode
from core.views import AccountAPIView

MODEL_ID = "groundwork"
# The largest max_tokens taken (then lowered to CHAT_MAX_TOKENS); past it a 400, not an overflow.
MAX_TOKENS_ACCEPTED = 2**31 - 1


class _Message(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "developer", "user", "assistant", "tool"])
    content = serializers.JSONField(allow_null=True)

    def validate_content(self, content):
        """OpenAI's shapes: a string, null, or a list of content parts, each an object with a
        string `type`; a "text" part's `text` is a string. Parts of other types (images,
        audio) are taken and not read."""
        if content is None or isinstance(content, str):
            return content
        if not isinstance(content, list):
            raise serializers.ValidationError("must be a string, null or a list of content parts.")
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise serializers.ValidationError('each content part must be an object with a "type".')
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise serializers.ValidationError('a content part of type "text" needs its "text" as a string.')
        return content


class _Number(serializers.FloatField):
    """A JSON number, as OpenAI takes it: "0.5" (a string) or true is refused, not converted."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class _WholeNumber(serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


def _max_tokens_field():
    # Above the server's cap is not an error: TurnOptions lowers it to CHAT_MAX_TOKENS.
    message = "must be a whole number of at least 1."
    too_large = f"must be a whole number of at most {MAX_TOKENS_ACCEPTED}."
    return _WholeNumber(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_TOKENS_ACCEPTED,
        error_messages={"invalid": message, "min_value": message, "max_value": too_large},
    )


class CompletionRequest(serializers.Serializer):
    TEMPERATURE = "must be a number from 0 to 2."

    model = serializers.CharField()
    messages = _Message(many=True, allow_empty=False)
    stream = serializers.BooleanField(required=False, default=False)
    stream_options = serializers.DictField(required=False, allow_null=True)
    temperature = _Number(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=2,
        error_messages={"invalid": TEMPERATURE, "min_value": TEMPERATURE, "max_value": TEMPERATURE},
    )
    max_tokens = _max_tokens_field()
    # Groundwork's own (an OpenAI SDK sends them with `extra_body`): retrieval steered by tags.
    tags = serializers.JSONField(
        required=False, allow_null=True, help_text="Answer only from documents carrying any of these tags"
    )
    exclude_tags = serializers.JSONField(
        required=False, allow_null=True, help_text="Answer from no document carrying any of these tags"
    )
    max_completion_tokens = _max_tokens_field()  # OpenAI's newer name; wins over max_tokens
    user = serializers.CharField(required=False, allow_blank=True)


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _question_and_history(messages: list[dict]) -> tuple[str, list[tuple[str, str]]]:
    """The last user message is the question; earlier user/assistant turns are the history."""
    turns = [(m["role"], _text(m.get("content"))) for m in messages if m["role"] in ("user", "assistant")]
    if not turns or turns[-1][0] != "user" or not turns[-1][1].strip():
        raise ChatError(CoreErrorCode.BAD_REQUEST, "The last message must be a non-empty user message.")
    return turns[-1][1], turns[:-1]


def _options(data: dict) -> TurnOptions:
    """The caller's settings for the turn. Its system and developer messages become the
    caller's part of our one system message (below the grounding rules, never instead)."""
    system = "\n\n".join(
        text
        for m in data["messages"]
        if m["role"] in ("system", "developer")
        if (text := _text(m.get("content")).strip())
    )
    max_tokens = data.get("max_completion_tokens") or data.get("max_tokens")
    return TurnOptions(
        max_tokens=max_tokens,
        temperature=data.get("temperature"),
        system=system,
        end_user=data.get("user") or "",
        tags=data.get("tags"),
        exclude_tags=data.get("exclude_tags"),
    )


class OpenAIView(AccountAPIView):
    """/v1: API keys only (an OpenAI SDK sends one); both scopes chat."""

    authentication_classes = [ApiKeyAuthentication]
    permission_classes = [allows(Action.CHAT)]


class ModelsView(OpenAIView):
    @extend_schema(
        responses=inline_serializer("ModelList", {"object": serializers.CharField(), "data": serializers.ListField()})
    )
    def get(self, request):
        return Response(
            {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "groundwork"}]}
        )


class ChatCompletionsView(OpenAIView):
    # Each step of a turn opens its own account context; no transaction spans the model call.
    account_transaction = False
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        request=CompletionRequest,
        responses=inline_serializer(
            "ChatCompletion",
            {
                "id": serializers.CharField(),
                "object": serializers.CharField(),
                "choices": serializers.ListField(),
                "usage": serializers.DictField(),
                "citations": serializers.ListField(),
            },
        ),
    )
    def post(self, request):
        body = CompletionRequest(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data["model"] != MODEL_ID:
            raise ChatError(
                ChatErrorCode.MODEL_NOT_FOUND,
                f'The model “{data["model"]}” does not exist here; use model="{MODEL_ID}".',
                status=404,
            )
        question, history = _question_and_history(data["messages"])
        run = TurnRun(
            account=self.account,
            api_key=self.api_key,
            question=question,
            surface="openai",
            history=history,
            options=_options(data),
        )
        run.prepare()
        created = int(time.time())
        if data["stream"]:
            include_usage = bool((data.get("stream_options") or {}).get("include_usage"))
            return streaming_response(self._chunks(request._request, run, created, include_usage))
        done = run.run()
        return Response(
            {
                "id": f"chatcmpl-gw-{done['message_id']}",
                "object": "chat.completion",
                "created": created,
                "model": MODEL_ID,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": done["finish_reason"],
                        "logprobs": None,
                        "message": {"role": "assistant", "content": done["answer"]},
                    }
                ],
                "usage": done["usage"],
                "citations": done["citations"],
            }
        )

    @staticmethod
    def _chunks(request, run: TurnRun, created: int, include_usage: bool):
        """The turn's frames as OpenAI `chat.completion.chunk` events, `data: [DONE]` last."""
        base = {"id": f"chatcmpl-gw-{run.id}", "object": "chat.completion.chunk", "created": created, "model": MODEL_ID}

        def chunk(delta: dict, finish=None) -> str:
            return sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

        def render(frame: dict):
            if frame["type"] == "chat.token":
                yield chunk({"content": frame["text"]})
            elif frame["type"] == "chat.done":
                yield chunk({}, frame["finish_reason"])
                if include_usage:
                    yield sse({**base, "choices": [], "usage": frame["usage"]})
            elif frame["type"] == "chat.error":
                yield sse({"error": {"code": frame["code"], "message": frame["message"]}})

        return run.http_events(
            request, render, head=(chunk({"role": "assistant", "content": ""}),), tail=(sse("[DONE]"),)
        )
