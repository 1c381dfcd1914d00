"""The address a login attempt came from, for login throttling (docs/security.md, "Password
guessing").

django-axes counts failures per (username, client address). Without a reverse proxy the
address is ``REMOTE_ADDR``. Behind one, ``REMOTE_ADDR`` is the proxy for everybody, so the
operator names the header the proxy sets (``JXAI_LOGIN_IP_HEADER``): its last
comma-separated address is used, the one the proxy itself appended (the earlier ones are
whatever the client claimed).
"""

from __future__ import annotations

from django.http import HttpRequest

from jxai_app import conf

__all__ = ["client_ip"]


def client_ip(request: HttpRequest) -> str | None:
    """The client address of ``request`` (module rule); ``None`` when there is none.

    Args:
        request: the login request (``AXES_CLIENT_IP_CALLABLE`` hands it over).
    """
    header = conf.login_ip_header()
    forwarded = request.META.get(header, "") if header else ""
    if forwarded:
        return str(forwarded).split(",")[-1].strip() or None
    address = request.META.get("REMOTE_ADDR")
    return str(address) if address else None
