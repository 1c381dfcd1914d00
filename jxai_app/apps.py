"""Django app configuration. ``ready()`` never touches the database (recovery of partial
messages runs as the ``recover_partial_messages`` management command instead)."""

from django.apps import AppConfig


class JxaiAppConfig(AppConfig):
    """The jxai Django app."""

    name = "jxai_app"
    verbose_name = "jxai assistant"
    default_auto_field = "django.db.models.BigAutoField"
