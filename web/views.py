"""HTTP views: probes for the orchestrator, health details, metrics."""

from __future__ import annotations

import hmac
import os

from django.http import HttpRequest, HttpResponse, JsonResponse

from web import health
from web.metrics import render


def livez(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers; touches no dependency."""
    return HttpResponse("ok", content_type="text/plain")


def _probe(checks) -> JsonResponse:
    ok, results = health.run(checks)
    return JsonResponse({"status": "ok" if ok else "fail", "checks": results},
                        status=200 if ok else 503)  # fmt: skip


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database and Redis answer and take writes, migrations are applied."""
    return _probe(health.READY)


def startupz(request: HttpRequest) -> JsonResponse:
    """Startup: the schema this code needs is in place."""
    return _probe({"migrations": health.migrations_applied})


def _allowed(request: HttpRequest) -> bool:
    token = os.environ.get("HEALTH_TOKEN", "")
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if token and given and hmac.compare_digest(token, given):
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_staff)


def healthz_details(request: HttpRequest) -> JsonResponse:
    """All nine checks as JSON; for staff or a bearer ``HEALTH_TOKEN``."""
    if not _allowed(request):
        return JsonResponse({"error": "staff login or Authorization: Bearer HEALTH_TOKEN"},
                            status=403)  # fmt: skip
    return _probe(health.ALL)


def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(render(), content_type="text/plain; version=0.0.4; charset=utf-8")
