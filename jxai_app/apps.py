"""Django app configuration. ``ready()`` never touches the database (recovery of partial
messages runs as the ``recover_partial_messages`` management command instead); it loads the
sign-in audit's signal receivers and the SSO redirect-URI check (docs/sso.md), which need
the models and so can only be loaded once the app registry is ready, as Django's signal
documentation prescribes."""

from importlib import import_module

from django.apps import AppConfig

AFTER_READY = ("jxai_app.web.signins",)
"""Modules whose import connects receivers and registers checks (by name: they import the
models, which apps.py, loaded before the registry is ready, cannot)."""


class JxaiAppConfig(AppConfig):
    """The jxai Django app."""

    name = "jxai_app"
    verbose_name = "jxai assistant"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        for module in AFTER_READY:
            import_module(module)
