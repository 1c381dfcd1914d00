"""``/metrics``, ``/healthz`` and ``/readyz`` (docs/operations.md; routes in ``jxai_app/urls.py``).

None of them needs a login (probes and scrapers have none); ``/metrics`` is let in only from
``JXAI_METRICS_ALLOWED_IPS`` or with ``Authorization: Bearer $JXAI_METRICS_TOKEN``
(:func:`jxai_app.conf.metrics_access`), and answers a 403 problem otherwise.
"""

from __future__ import annotations

import hmac
import ipaddress
import json

from django.http import HttpRequest, HttpResponse, JsonResponse

from jxai_app import conf
from jxai_app.api import problem_response
from jxai_app.core.problems import problem
from jxai_app.ops import health, metrics
from jxai_app.turns.worker import get_hub

__all__ = ["healthz", "metrics_view", "readyz"]


def _may_read_metrics(request: HttpRequest) -> bool:
    access = conf.metrics_access()
    if access.token:
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), access.token.encode()):
            return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in access.allowed_networks)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the Prometheus text format, merged over the host's workers when
    ``PROMETHEUS_MULTIPROC_DIR`` is set (:func:`jxai_app.ops.metrics.exposition`); 403
    ``forbidden`` for a client that is neither allowed by address nor bears the token."""
    if not _may_read_metrics(request):
        return problem_response(problem("forbidden", "Metrics are readable from the allowed addresses "
                                                     "(JXAI_METRICS_ALLOWED_IPS) or with the metrics token."))
    return HttpResponse(metrics.exposition(), content_type=metrics.CONTENT_TYPE)


def healthz(request: HttpRequest) -> HttpResponse:
    """``GET /healthz``: 200 ``{"status": "ok"}`` while the process serves requests (liveness)."""
    return JsonResponse({"status": "ok"})


async def readyz(request: HttpRequest) -> HttpResponse:
    """``GET /readyz``: 200 when the database and the channel layer answer and the worker is
    not draining, else 503; the body names each check (:func:`jxai_app.ops.health.readiness`),
    ``{"status": "ok" | "unavailable", "checks": {…}}``."""
    checks = await health.readiness(get_hub())
    ready = all(value == "ok" for value in checks.values())
    body = {"status": "ok" if ready else "unavailable", "checks": checks}
    return HttpResponse(json.dumps(body), status=200 if ready else 503, content_type="application/json",
                        headers={"Cache-Control": "no-store"})
