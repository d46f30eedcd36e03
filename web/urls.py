"""Routes of the web app."""

from django.urls import path

from web import views

urlpatterns = [
    path("livez", views.livez, name="livez"),
]
