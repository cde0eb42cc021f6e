from django.urls import path

from chat import views

urlpatterns = [
    path("", views.chat_view, name="chat"),
    path("<int:conversation_id>/", views.chat_view, name="conversation"),
    path("feedback/", views.feedback_view, name="feedback"),
]
