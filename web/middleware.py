"""Probes answer before any other middleware: the kubelet calls them by pod IP, a Host
that ALLOWED_HOSTS rightly refuses everywhere else."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from web import views

PROBES = {"/livez": views.livez, "/readyz": views.readyz, "/startupz": views.startupz}


class ProbeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path)
        if probe is not None:
            return probe(request)
        return self.get_response(request)
