"""URL routes: the admin, the dashboard, the JSON API and the web app."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("dashboard/", include("web.dashboard")),
    path("api/", include("web.api")),
    path("", include("web.urls")),
]
