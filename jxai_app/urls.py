"""HTTP routes of the jxai app: the chat page, the /ai API, problem type pages, and the
operator's endpoints (docs/operations.md)."""

from django.urls import path

from jxai_app import api, uploads, views
from jxai_app.ops import endpoints

urlpatterns: list = [
    path("", views.chat, name="chat"),
    path("c/<uuid:conversation_id>", views.chat, name="conversation"),
    path("ai/chat", api.chat, name="ai-chat"),
    path("ai/models", api.models, name="ai-models"),
    path("ai/attachments", uploads.attachments, name="ai-attachments"),
    path("ai/attachments/<str:attachment_id>", uploads.attachment_file, name="ai-attachment"),
    path("problems/", api.problem_index, name="problem-index"),
    path("problems/<slug:slug>", api.problem_page, name="problem"),
    path("metrics", endpoints.metrics_view, name="metrics"),
    path("healthz", endpoints.healthz, name="healthz"),
    path("readyz", endpoints.readyz, name="readyz"),
]
