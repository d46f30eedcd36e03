"""HTTP views: probes for the orchestrator, health details, metrics."""

from __future__ import annotations

import hmac
import ipaddress
import os

from django.http import HttpRequest, HttpResponse, JsonResponse

from web import health
from web.metrics import render


def livez(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers; touches no dependency."""
    return HttpResponse("ok", content_type="text/plain")


def _probe(checks) -> JsonResponse:
    """What a probe needs: pass or fail, and which check failed; never an error's text."""
    ok, results = health.run(checks)
    passed = {c["name"]: c["ok"] for c in results}
    return JsonResponse({"status": "ok" if ok else "fail", "checks": passed},
                        status=200 if ok else 503)  # fmt: skip


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database and Redis answer and take writes, migrations are applied."""
    return _probe(health.READY)


def startupz(request: HttpRequest) -> JsonResponse:
    """Startup: the schema this code needs is in place."""
    return _probe({"migrations": health.migrations_applied})


def _bearer(request: HttpRequest, variable: str) -> bool:
    token = os.environ.get(variable, "")
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return bool(token and given and hmac.compare_digest(token, given))


def _staff(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_staff)


def healthz_details(request: HttpRequest) -> JsonResponse:
    """All nine checks with their reasons as JSON; for staff or a bearer ``HEALTH_TOKEN``."""
    if not (_bearer(request, "HEALTH_TOKEN") or _staff(request)):
        return JsonResponse({"error": "staff login or Authorization: Bearer HEALTH_TOKEN"},
                            status=403)  # fmt: skip
    ok, results = health.run(health.ALL)
    return JsonResponse({"status": "ok" if ok else "fail", "checks": results},
                        status=200 if ok else 503)  # fmt: skip


_FORWARDED = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP", "HTTP_VIA")


def _from_loopback(request: HttpRequest) -> bool:
    """A client on this machine itself: from loopback, and not relayed by a proxy there (a
    reverse proxy on the same host makes every outside request come from loopback)."""
    if any(request.META.get(header) for header in _FORWARDED):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text; it names crawled hosts and jobs, so it needs ``METRICS_TOKEN`` as a
    bearer token (or, with no token set, a client on this machine's loopback that no proxy
    relayed)."""
    if os.environ.get("METRICS_TOKEN"):
        allowed = _bearer(request, "METRICS_TOKEN")
    else:
        allowed = _from_loopback(request)
    if not allowed:
        return HttpResponse("Authorization: Bearer METRICS_TOKEN required\n", status=403,
                            content_type="text/plain")  # fmt: skip
    return HttpResponse(render(), content_type="text/plain; version=0.0.4; charset=utf-8")
