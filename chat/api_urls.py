from django.urls import path

from chat import api

urlpatterns = [
    path("chat/", api.ChatView.as_view(), name="api-chat"),
    path("conversations/", api.ConversationListView.as_view(), name="api-conversations"),
    path("conversations/<int:conversation_id>/", api.ConversationDetailView.as_view(), name="api-conversation"),
    path(
        "conversations/<int:conversation_id>/regenerate/",
        api.ConversationRegenerateView.as_view(),
        name="api-conversation-regenerate",
    ),
    path("messages/<int:message_id>/feedback/", api.FeedbackView.as_view(), name="api-message-feedback"),
    path("feedback/", api.FeedbackListView.as_view(), name="api-feedback"),
]
