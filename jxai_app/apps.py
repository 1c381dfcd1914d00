"""Django app configuration. ``ready()`` never touches the database (recovery of partial
messages runs as the ``recover_partial_messages`` management command instead); it loads the
sign-in audit's signal receivers and the SSO redirect-URI check (docs/sso.md). They need the
models, so they are imported in ``ready()``, once the app registry is ready: Django's
documented place for connecting receivers ("Connecting receiver functions", the signals
topic guide), and the one import inside a function the floors allow (docs/architecture.md)."""

from django.apps import AppConfig


class JxaiAppConfig(AppConfig):
    """The jxai Django app."""

    name = "jxai_app"
    verbose_name = "jxai assistant"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jxai_app.web import signins  # noqa: F401  (connects receivers, registers a check)
