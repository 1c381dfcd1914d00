"""Root URL configuration (docs/architecture.md "Routes")."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path

from jxai_app.web import sso

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
    # The login page with "Sign in with <name>", logout on to the provider, and the provider's
    # way in and back (docs/sso.md); Django's other authentication views as before.
    path("accounts/login/", sso.SsoLoginView.as_view(), name="login"),
    path("accounts/logout/", sso.SsoLogoutView.as_view(), name="logout"),
    path("accounts/oidc/login/", sso.sso_login, name="sso-login"),
    path("accounts/oidc/callback/", sso.sso_callback, name="sso-callback"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("jxai_app.urls")),
]
