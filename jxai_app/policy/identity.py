"""Who a sign-in through the identity provider is, and which groups it brings (docs/sso.md
"Accounts", "Groups").

The protocol checks (discovery, state, PKCE, the ID token's signature, issuer, audience,
expiry and nonce) are the OpenID Connect library's, done before anything here runs; these
rules decide what the verified claims mean for jxai:

- **domains**: with allowed domains configured, the ``email`` claim's domain must be one of
  them, and an ``email_verified`` claim that is false refuses the sign-in;
- **accounts**: the user is found by the link (issuer, subject) in
  :class:`~jxai_app.models.SsoIdentity`. Without a link, the first sign-in creates the user,
  named by the configured username claim, with no usable password, and the link. An existing
  account of that name (compared without case) is never taken over: the sign-in is refused
  until an operator links it in admin;
- **groups**: on every sign-in the user's *managed* groups (those whose name starts with the
  configured prefix or is in the configured list; with neither, every group) are made equal
  to the managed names in the groups claim, adding and removing; other groups are left
  alone. ``is_staff`` and ``is_superuser`` are never set from a claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from jxai_app.conf import Oidc
from jxai_app.models import SignInEvent, SsoIdentity
from jxai_app.policy import audit

__all__ = ["SignInRefused", "sign_in"]


class SignInRefused(Exception):
    """The verified claims do not admit the person (module rules); ``str()`` is the sentence
    the refusal page shows."""


def _check_domain(claims: Mapping[str, Any], oidc: Oidc) -> None:
    if not oidc.allowed_domains:
        return
    email = str(claims.get("email") or "")
    domain = email.rpartition("@")[2].lower() if "@" in email else ""
    if domain not in oidc.allowed_domains:
        shown = email or "no email address"
        raise SignInRefused(f"Your account ({shown}) is not in an email domain allowed to sign in here.")
    if claims.get("email_verified") is False:
        raise SignInRefused(f"The identity provider has not verified your email address {email}.")


def _claimed_groups(claims: Mapping[str, Any], oidc: Oidc) -> set[str]:
    raw = claims.get(oidc.groups_claim)
    names = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, (list, tuple)) else []
    return {str(name) for name in names if str(name) and _managed(str(name), oidc)}


def _managed(name: str, oidc: Oidc) -> bool:
    if not oidc.group_prefix and not oidc.groups:
        return True
    return name in oidc.groups or bool(oidc.group_prefix) and name.startswith(oidc.group_prefix)


def _find_or_create(claims: Mapping[str, Any], oidc: Oidc) -> tuple[Any, bool]:
    issuer, subject = str(claims["iss"]), str(claims["sub"])
    link = SsoIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    if link is not None:
        return link.user, False
    username = str(claims.get(oidc.username_claim) or "").strip()
    if not username:
        raise SignInRefused(f"The identity provider sent no {oidc.username_claim!r} claim to name your account.")
    users = get_user_model()
    if len(username) > 150:
        raise SignInRefused("The name the identity provider sent for your account is longer than 150 characters.")
    if users.objects.filter(username__iexact=username).exists():
        raise SignInRefused(f"An account named {username!r} already exists here and is not linked to this sign-in; "
                            "an administrator can link it (docs/sso.md \"Accounts\").")
    try:
        with transaction.atomic():
            user = users(username=username, email=str(claims.get("email") or ""),
                         first_name=str(claims.get("given_name") or "")[:150],
                         last_name=str(claims.get("family_name") or "")[:150])
            user.set_unusable_password()
            user.save()
            SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    except IntegrityError:  # a parallel first sign-in of the same person (or name) won
        link = SsoIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
        if link is None:
            raise SignInRefused(f"An account named {username!r} was created at the same moment; try again.") from None
        return link.user, False
    return user, True


def _sync_groups(user: Any, claims: Mapping[str, Any], oidc: Oidc) -> tuple[tuple[str, ...], tuple[str, ...]]:
    wanted = _claimed_groups(claims, oidc)
    current = {group.name: group for group in user.groups.all() if _managed(group.name, oidc)}
    added = sorted(wanted - current.keys())
    removed = sorted(current.keys() - wanted)
    if added:
        user.groups.add(*(Group.objects.get_or_create(name=name)[0] for name in added))
    if removed:
        user.groups.remove(*(current[name] for name in removed))
    return tuple(added), tuple(removed)


def sign_in(claims: Mapping[str, Any], oidc: Oidc, *, ip: str | None) -> Any:
    """Admit the person the verified ``claims`` describe (module rules), sync their groups,
    write the audit rows (``sso-sign-in``, plus ``groups-changed`` when any changed) and
    return the user (found by the link, or created now).

    Args:
        claims: the ID token's verified claims (``iss`` and ``sub`` present), completed by
            the userinfo endpoint's for claims the ID token lacked.
        oidc: the provider's settings (:func:`jxai_app.conf.oidc`).
        ip: the client address, for the audit.

    Raises:
        SignInRefused: a domain not allowed, an unverified email, no username claim, an
            unlinked account of the same name, a deactivated user. The caller records the
            ``sso-failure`` row.
    """
    _check_domain(claims, oidc)
    user, created = _find_or_create(claims, oidc)
    if not user.is_active:
        raise SignInRefused("Your account here has been deactivated.")
    with transaction.atomic():
        added, removed = _sync_groups(user, claims, oidc)
        SsoIdentity.objects.filter(user=user, issuer=str(claims["iss"]), subject=str(claims["sub"])).update(
            last_sign_in_at=timezone.now())
        audit.record(SignInEvent.SSO_SIGN_IN, user=user, actor=user.get_username(), ip=ip,
                     detail="account created" if created else "")
        if added or removed:
            audit.record(SignInEvent.GROUPS_CHANGED, user=user, actor=user.get_username(), ip=ip,
                         detail=f"added: {', '.join(added) or '-'}; removed: {', '.join(removed) or '-'}")
    return user
