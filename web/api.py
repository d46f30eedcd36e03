"""The JSON API: jobs (create, read, change, delete), their actions, stats, pages, frontier
URLs and exports, described by an OpenAPI 3 schema at ``/api/schema/`` and browsable at
``/api/docs/`` (Swagger UI from the platform's own static files, no CDN).

Sign in with a token (``manage.py drf_create_token USER``, then ``Authorization: Token KEY``)
or the admin's session. Whose jobs one sees and operates is ``web.access``'s rule (staff:
every job; others: their own); someone else's job is not found, never forbidden, so ids tell
nothing. Jobs change only through ``tasks.frontier.jobs``: creating and editing are validated
there (one set of rules and messages for the API, the admin, the CLI and specs), deleting
goes in batches, and an action a job's state does not allow is a 409 naming the state.
Lists are cursor-paginated (``PAGE_SIZE``), so pages stay stable while a crawl adds rows.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db.models import Count, QuerySet
from django.http import HttpResponseBase, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import generics, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.parsers import JSONParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView

from tasks.frontier import jobs, spiderjobs
from tasks.frontier.stats import stats_of
from web import access
from web.export import Export, count_items
from web.models import CrawlJob, FrontierURL, Item, Page
from web.serializers import (
    DetailSerializer,
    FrontierURLSerializer,
    ItemSerializer,
    JobSerializer,
    PageSerializer,
    StatsSerializer,
)

# Each action: the function that does it, the states it starts from (as in the admin) and what
# it means. The functions move a job by compare-and-set; a refusal names the state it is in.
ACTIONS: dict[str, tuple[Callable[[CrawlJob], bool], frozenset[str], str]] = {
    "start": (jobs.start, jobs.STARTS_FROM["start"], "Put the seeds in the frontier and crawl."),
    "pause": (jobs.pause, jobs.STARTS_FROM["pause"],
              "Stop new fetches; pages in flight finish and are kept."),
    "resume": (jobs.resume, jobs.STARTS_FROM["resume"], "Crawl on from where the job paused."),
    "cancel": (jobs.cancel, jobs.STARTS_FROM["cancel"],
               "End the job: URLs not fetched yet are skipped, pages in flight are kept."),
    "recrawl": (jobs.recrawl, jobs.STARTS_FROM["recrawl"],
                "Run an ended job again: every URL it knows is fetched again (conditionally) "
                "and what is new is followed."),
}  # fmt: skip
_FIELD_ERRORS = OpenApiResponse(
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
    description="The job was refused: messages by field, as the admin and the CLI give them.",
)
_REFUSED = OpenApiResponse(DetailSerializer, description="The job's state does not allow it.")


class _ByIdCursor(CursorPagination):
    """A cursor whose position is a row's id: one that is none (a cursor made by hand) is
    refused as DRF refuses a cursor it cannot read (404 "Invalid cursor"), not left to fail
    the query."""

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            try:
                position = int(cursor.position)
            except ValueError:
                raise NotFound(self.invalid_cursor_message) from None
            if not -(2**63) <= position < 2**63:
                raise NotFound(self.invalid_cursor_message)
        return cursor


class NewestFirst(_ByIdCursor):
    ordering = "-id"


class ById(_ByIdCursor):
    ordering = "id"


# The export's formats. They only take part in content negotiation (``?format=`` or
# ``Accept``) and in the schema: the export streams its own bytes.
class JsonLinesRenderer(BaseRenderer):
    media_type = "application/jsonl"
    format = "jsonl"


class CsvRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"


class WarcRenderer(BaseRenderer):
    media_type = "application/gzip"  # WARC 1.1, one gzip member per record
    format = "warc"


def _action_schema(verb: str) -> Callable:
    _, allowed, meaning = ACTIONS[verb]
    return extend_schema(
        summary=f"{verb.capitalize()} the job",
        description=f"{meaning} Allowed from: {', '.join(sorted(allowed))}.",
        request=None,
        responses={200: JobSerializer, 409: _REFUSED},
    )


@extend_schema_view(
    list=extend_schema(summary="The jobs you may see, newest first"),
    retrieve=extend_schema(summary="A job: its configuration and progress"),
    create=extend_schema(
        summary="Create a draft job (start it with the start action)",
        responses={201: JobSerializer, 400: _FIELD_ERRORS},
        examples=[
            OpenApiExample(
                "A documentation crawl",
                request_only=True,
                value={
                    "name": "python-docs",
                    "seeds": ["https://docs.python.org/3/"],
                    "max_depth": 3,
                    "exclude_patterns": ["/whatsnew/"],
                    "delay": 0.5,
                    "extract": [{"name": "title", "selector": "h1"}],
                    "schedule": "0 3 * * *",
                },
            )
        ],
    ),
    update=extend_schema(
        summary="Change a job's configuration (a running job's new seeds join its frontier)",
        responses={200: JobSerializer, 400: _FIELD_ERRORS},
    ),
    partial_update=extend_schema(
        summary="Change some of a job's configuration",
        responses={200: JobSerializer, 400: _FIELD_ERRORS},
    ),
    destroy=extend_schema(
        summary="Delete a job, its URLs, pages and stored bodies (cancelled first if running)"
    ),
)
class JobViewSet(viewsets.ModelViewSet):
    """Crawl jobs: their configuration and progress."""

    serializer_class = JobSerializer
    pagination_class = NewestFirst
    parser_classes = [JSONParser]
    filterset_fields = ["state"]
    lookup_value_converter = "int"

    def get_queryset(self) -> QuerySet[CrawlJob]:
        return access.jobs(self.request.user).select_related("owner")

    def get_success_headers(self, data: dict) -> dict[str, str]:
        return {"Location": reverse("job-detail", args=[data["id"]])}

    def perform_destroy(self, job: CrawlJob) -> None:
        jobs.delete(job.pk)

    def _act(self, verb: str) -> Response:
        job = self.get_object()
        operation, allowed, _ = ACTIONS[verb]
        if job.state in allowed and operation(job):
            return Response(self.get_serializer(job).data)
        job.refresh_from_db()
        return Response(
            {"detail": f"cannot {verb} job #{job.pk}: it is {job.state} "
                       f"(it must be {' or '.join(sorted(allowed))})"},
            status=409,
        )  # fmt: skip

    @_action_schema("start")
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str) -> Response:
        return self._act("start")

    @_action_schema("pause")
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        return self._act("pause")

    @_action_schema("resume")
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        return self._act("resume")

    @_action_schema("cancel")
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        return self._act("cancel")

    @_action_schema("recrawl")
    @action(detail=True, methods=["post"])
    def recrawl(self, request: Request, pk: str) -> Response:
        return self._act("recrawl")

    @extend_schema(summary="Where the job stands now", responses=StatsSerializer)
    @action(detail=True, methods=["get"])
    def stats(self, request: Request, pk: str) -> Response:
        job = self.get_object()
        outcomes = (
            FrontierURL.objects.filter(job_id=job.pk)
            .exclude(error_reason="")
            .values_list("error_reason")
            .annotate(n=Count("id"))
        )
        return Response({
            "state": job.state,
            "run": job.run,
            "frontier": jobs.counts(job.pk),
            "pages": Page.objects.filter(job_id=job.pk).count(),
            "outcomes": dict(outcomes),
            "stats": job.stats,
            "items": count_items(job.pk),
            "drops": spiderjobs.drops(job.pk),
            "spider_stats": stats_of(job) if job.spider else {},
        })  # fmt: skip


class JobExportView(APIView):
    """A job's results, streamed in the format asked for (``?format=`` or ``Accept``)."""

    renderer_classes = [JsonLinesRenderer, CsvRenderer, WarcRenderer]

    def finalize_response(
        self, request: Request, response: HttpResponseBase, *args, **kwargs
    ) -> HttpResponseBase:
        if isinstance(response, Response):  # a refusal or OPTIONS: JSON, whatever was asked
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)

    @extend_schema(
        summary="The job's results as JSON Lines, CSV or WARC",
        description="Streamed as the crawl stands now: one row per URL that ended (the "
        "admin's and `manage.py export`'s bytes). WARC holds the pages whose bodies are "
        "stored.",
        responses={
            (200, JsonLinesRenderer.media_type): OpenApiTypes.STR,
            (200, CsvRenderer.media_type): OpenApiTypes.STR,
            (200, WarcRenderer.media_type): OpenApiTypes.BINARY,
        },
    )
    def get(self, request: Request, job_id: int) -> StreamingHttpResponse:
        job = get_object_or_404(access.jobs(request.user), pk=job_id)
        fmt = request.accepted_renderer.format
        name = f"job{job.pk}.{fmt}" + (".gz" if fmt == "warc" else "")
        response = StreamingHttpResponse(
            Export(job, fmt, filename=name).chunks(),
            content_type=request.accepted_renderer.media_type,
        )
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class JobItemsExportView(JobExportView):
    """A spider job's items, streamed as JSON Lines or CSV (``?format=`` or ``Accept``)."""

    renderer_classes = [JsonLinesRenderer, CsvRenderer]

    @extend_schema(
        summary="The job's items as JSON Lines or CSV",
        description="Streamed as the crawl stands now: the items its pipelines kept, in the "
        "order they were stored; in CSV a column per field any item has, formulas neutralised "
        "(`manage.py export JOB --items` writes Scrapy's feed bytes instead).",
        responses={(200, JsonLinesRenderer.media_type): OpenApiTypes.STR,
                   (200, CsvRenderer.media_type): OpenApiTypes.STR},
    )  # fmt: skip
    def get(self, request: Request, job_id: int) -> StreamingHttpResponse:
        job = get_object_or_404(access.jobs(request.user), pk=job_id)
        fmt = request.accepted_renderer.format
        name = f"job{job.pk}-items.{fmt}"
        response = StreamingHttpResponse(
            Export(job, fmt, filename=name, items=True).chunks(),
            content_type=request.accepted_renderer.media_type,
        )
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class _JobRows(generics.ListAPIView):
    """Rows of one job the user may see, oldest first."""

    pagination_class = ById

    def get_queryset(self) -> QuerySet:
        if getattr(self, "swagger_fake_view", False):  # the schema is drawn without a job
            return self.queryset.none()
        job = get_object_or_404(access.jobs(self.request.user), pk=self.kwargs["job_id"])
        return self.queryset.filter(job=job)


class JobPagesView(_JobRows):
    """The pages a job stored."""

    queryset = Page.objects.select_related("url")
    serializer_class = PageSerializer
    filterset_fields = ["status", "content_type"]


class JobURLsView(_JobRows):
    """A job's frontier: every URL it found, with its state and outcome."""

    queryset = FrontierURL.objects.all()
    serializer_class = FrontierURLSerializer
    filterset_fields = ["state", "error_reason", "depth"]


class APIRootView(APIView):
    """What the API offers: its collections, its OpenAPI schema and its interactive docs."""

    permission_classes: list = []

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        return Response({
            "jobs": request.build_absolute_uri(reverse("job-list")),
            "schema": request.build_absolute_uri(reverse("api-schema")),
            "docs": request.build_absolute_uri(reverse("api-docs")),
        })  # fmt: skip


class JobItemsView(_JobRows):
    """The items a spider job kept (``?dropped=REASON``: those dropped for it)."""

    queryset = Item.objects.select_related("url")
    serializer_class = ItemSerializer

    def get_queryset(self) -> QuerySet:
        return super().get_queryset().filter(dropped=self.request.query_params.get("dropped", ""))


router = SimpleRouter(use_regex_path=False)
router.register("jobs", JobViewSet, basename="job")
urlpatterns = [
    path("", APIRootView.as_view(), name="api-root"),
    *router.urls,
    path("jobs/<int:job_id>/pages/", JobPagesView.as_view(), name="job-pages"),
    path("jobs/<int:job_id>/urls/", JobURLsView.as_view(), name="job-urls"),
    path("jobs/<int:job_id>/export/", JobExportView.as_view(), name="job-export"),
    path("jobs/<int:job_id>/items/", JobItemsView.as_view(), name="job-items"),
    path("jobs/<int:job_id>/items/export/", JobItemsExportView.as_view(), name="job-items-export"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
