"""jxai's admin site: Django's own, plus the registered-tools page as an entry of its own in
the jxai app's list on the admin index and in the navigation sidebar (docs/architecture.md "Admin").

Installed through :class:`JxaiAdminConfig` (``INSTALLED_APPS`` names it in place of
``django.contrib.admin``), Django's documented way to replace the default site; every
``@admin.register`` then registers on this site.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest
from django.urls import reverse

REGISTERED_TOOLS = "Registered tools"


class JxaiAdminSite(admin.AdminSite):
    """The default admin site with the registered-tools entry (see the module docstring), named jxai."""

    site_header = "jxai administration"
    site_title = "jxai admin"
    index_title = "Site administration"
    enable_nav_sidebar = False
    """No model list beside every page (the index and the breadcrumbs lead everywhere): at
    1280 px it took 270 px, and a list with its filters then had ~630 px for its columns."""

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[dict[str, Any]]:
        """Django's app list; the jxai app's gains a "Registered tools" row for staff who may
        view tool policies (the page's own permission)."""
        apps = super().get_app_list(request, app_label)
        if not request.user.has_perm("jxai_app.view_toolpolicy"):
            return apps
        for app in apps:
            if app["app_label"] == "jxai_app":
                app["models"].append({
                    "name": REGISTERED_TOOLS, "object_name": "RegisteredTools", "model": None,
                    "perms": {"add": False, "change": False, "delete": False, "view": True},
                    "admin_url": reverse("admin:jxai_app_registered_tools", current_app=self.name),
                    "add_url": None, "view_only": True,
                })
                app["models"].sort(key=lambda row: row["name"])
        return apps


class JxaiAdminConfig(AdminConfig):
    """``django.contrib.admin`` with :class:`JxaiAdminSite` as its default site."""

    default_site = "jxai_app.admin_site.JxaiAdminSite"
