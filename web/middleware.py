"""Probes and ``/metrics`` answer before any other middleware: the kubelet and Prometheus
call them by pod IP, a Host that ALLOWED_HOSTS rightly refuses everywhere else (``/metrics``
checks its own token, and nothing it answers depends on the Host). A request about one job
(the API's and the dashboard's ``jobs/<id>/...``) logs its lines with the job
(``crawl_job``, ``crawlplatform/logs.py``)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

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


class NulMiddleware:
    """A query with a NUL character (``?state=%00``) is a bad request: PostgreSQL takes no
    NUL in a text, and a filter that passed one on would fail the request as a server
    error."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in unquote(request.META.get("QUERY_STRING", "")):
            return HttpResponseBadRequest("a query parameter holds a NUL character",
                                          content_type="text/plain")  # fmt: skip
        return self.get_response(request)


class JobLogMiddleware:
    """Lines logged while a request about one job is answered carry its ``crawl_job``: the
    view's, and Django's own line about an error answer, until the response is closed."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            response = self.get_response(request)
        except BaseException:
            if (token := request.__dict__.pop("_log_token", None)) is not None:
                logs.leave(token)
            raise
        token = request.__dict__.pop("_log_token", None)
        if token is not None:  # Django logs a 4xx or 5xx ("Bad Request: ...") after this returns:
            response._resource_closers.append(lambda: logs.leave(token))  # until it is closed
        return response

    def process_view(self, request: HttpRequest, view: Callable, args: tuple,
                     kwargs: dict) -> None:  # fmt: skip
        match = request.resolver_match
        job = kwargs.get("job_id", kwargs.get("pk"))
        if match is not None and (match.url_name or "").startswith("job") and job is not None:
            request._log_token = logs.enter(crawl_job=int(job) if str(job).isdigit() else None)
