"""The sign-in audit (docs/sso.md "Audit"): one :class:`~jxai_app.models.SignInEvent` row
per sign-in that succeeded or was refused (through the identity provider or by password),
per set of group changes a provider sign-in applied, and per API token issued. Rows are only
ever added here; admin lists them read-only."""

from __future__ import annotations

import ipaddress
from typing import Any

from jxai_app.models import SignInEvent

__all__ = ["record"]


def record(kind: str, *, user: Any = None, actor: str = "", ip: str | None = None, detail: str = "") -> SignInEvent:
    """Add one audit row and return it.

    Args:
        kind: one of ``SignInEvent``'s kinds (``SignInEvent.SSO_SIGN_IN`` …).
        user: the account concerned, or ``None`` when the attempt named none that exists.
        actor: who acted (the name typed or claimed; the staff member issuing a token),
            cut to 255 characters.
        ip: the client address (:func:`jxai_app.web.clientip.client_ip`); a value that is
            not an IP address (a proxy header's garbage) is stored as empty.
        detail: why it was refused, the groups added and removed, the token's name.
    """
    address: str | None = None
    if ip:
        try:
            address = str(ipaddress.ip_address(ip))
        except ValueError:
            address = None
    return SignInEvent.objects.create(kind=kind, user=user, actor=actor[:255], ip_address=address, detail=detail)
