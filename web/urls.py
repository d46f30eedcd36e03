"""Routes of the web app."""

from django.urls import path

from web import views

urlpatterns = [
    path("livez", views.livez, name="livez"),
    path("readyz", views.readyz, name="readyz"),
    path("startupz", views.startupz, name="startupz"),
    path("healthz/details", views.healthz_details, name="healthz-details"),
    path("metrics", views.metrics, name="metrics"),
]
