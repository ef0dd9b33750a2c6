"""URL configuration of the demo site: the admin, and the app at the root (a host project mounts
it under a prefix of its own: docs/quickstart.md)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("nrllm_agents.urls")),
]
