"""HTTP routes of the jxai app: the chat page, the /ai API and problem type pages."""

from django.urls import path

from jxai_app import api, views

urlpatterns: list = [
    path("", views.chat, name="chat"),
    path("c/<uuid:conversation_id>", views.chat, name="conversation"),
    path("ai/chat", api.chat, name="ai-chat"),
    path("ai/models", api.models, name="ai-models"),
    path("problems/", api.problem_index, name="problem-index"),
    path("problems/<slug:slug>", api.problem_page, name="problem"),
]
