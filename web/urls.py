"""Routes of the web app."""

from django.urls import path
from django.views.generic import RedirectView

from web import views

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="dashboard:fleet"), name="home"),
    path("livez", views.livez, name="livez"),
    path("readyz", views.readyz, name="readyz"),
    path("startupz", views.startupz, name="startupz"),
    path("healthz/details", views.healthz_details, name="healthz-details"),
    path("metrics", views.metrics, name="metrics"),
]
