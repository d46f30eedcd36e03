"""URL routes: the admin, the dashboard, the JSON API and the web app."""

from django.contrib import admin
from django.urls import include, path

admin.autodiscover()  # here rather than at start-up: only processes that serve pages need it

urlpatterns = [
    path("admin/", admin.site.urls),
    path("dashboard/", include("web.dashboard")),
    path("api/", include("web.api")),
    path("", include("web.urls")),
]
