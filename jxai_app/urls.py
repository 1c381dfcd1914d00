"""HTTP routes of the jxai app: the chat page, the /ai API, problem type pages, and the
operator's endpoints (docs/operations.md)."""

from django.urls import path

from jxai_app import api, share_views, uploads, views, yourdata
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
    path("data/export", yourdata.data_export, name="data-export"),
    path("data/import", yourdata.data_import_view, name="data-import"),
    path("account/delete", yourdata.account_delete, name="account-delete"),
    path("metrics", endpoints.metrics_view, name="metrics"),
    path("healthz", endpoints.healthz, name="healthz"),
    path("readyz", endpoints.readyz, name="readyz"),
    # docs/data.md "Share links"
    path("s/<str:token>", share_views.share_page, name="share"),
    path("s/<str:token>/continue", share_views.share_continue, name="share-continue"),
    path("shares", share_views.shares_endpoint, name="shares"),
    path("shares/<uuid:share_id>/<str:action>", share_views.share_action, name="share-action"),
]
