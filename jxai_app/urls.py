"""HTTP routes of the jxai app: the chat page, the /ai API and problem type pages."""

from django.urls import path

urlpatterns: list = []
