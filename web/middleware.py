"""Probes and ``/metrics`` answer before any other middleware: the kubelet and Prometheus
call them by pod IP, a Host that ALLOWED_HOSTS rightly refuses everywhere else (``/metrics``
checks its own token, and nothing it answers depends on the Host)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from web import views

PROBES = {"/livez": views.livez, "/readyz": views.readyz, "/startupz": views.startupz,
          "/metrics": views.metrics}  # fmt: skip


class ProbeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path)
        if probe is not None:
            return probe(request)
        return self.get_response(request)
