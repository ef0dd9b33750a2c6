"""URL configuration: admin (with the RQ dashboard), the REST API, the playground."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/django-rq/", include("django_rq.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("nrllm_agents.api.urls")),
    path("", include("nrllm_agents.web.urls")),
]
