"""Root URL configuration (docs/architecture.md "Routes")."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path

FAVICON = "jxai_app/favicon.svg"
"""The site icon (a static file); pages link it with ``<link rel="icon">``."""


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """``/favicon.ico``, which browsers ask for on pages that name no icon (Django's error
    pages, a bare API response): a 302 to the static SVG, resolved per request so the
    manifest storage's hashed name is used once ``collectstatic`` has run. Temporary, so a
    browser never keeps an old hashed URL after the icon changes."""
    return HttpResponseRedirect(static(FAVICON))


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("jxai_app.urls")),
]
