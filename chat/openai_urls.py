from django.urls import path

from chat import openai_api

urlpatterns = [
    path("models", openai_api.ModelsView.as_view(), name="openai-models"),
    path("chat/completions", openai_api.ChatCompletionsView.as_view(), name="openai-chat-completions"),
]
