"""Probes and ``/metrics`` answer before any other middleware: the kubelet and Prometheus
call them by pod IP, a Host that ALLOWED_HOSTS rightly refuses everywhere else (``/metrics``
checks its own token, and nothing it answers depends on the Host). A request about one job
(the API's and the dashboard's ``jobs/<id>/...``) logs its lines with the job
(``crawl_job``, ``crawlplatform/logs.py``)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from crawlplatform import logs
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


class JobLogMiddleware:
    """Lines logged while a view about one job runs carry its ``crawl_job``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return self.get_response(request)
        finally:
            token = request.__dict__.pop("_log_token", None)
            if token is not None:
                logs.leave(token)

    def process_view(self, request: HttpRequest, view: Callable, args: tuple,
                     kwargs: dict) -> None:  # fmt: skip
        match = request.resolver_match
        job = kwargs.get("job_id", kwargs.get("pk"))
        if match is not None and (match.url_name or "").startswith("job") and job is not None:
            request._log_token = logs.enter(crawl_job=int(job) if str(job).isdigit() else None)
