"""HTTP views: probes for the orchestrator."""

from django.http import HttpRequest, HttpResponse


def livez(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers; touches no dependency."""
    return HttpResponse("ok", content_type="text/plain")
