"""URL configuration: admin (with the RQ dashboard), the REST API, the playground, ``/metrics``."""

from django.contrib import admin
from django.urls import include, path

from nrllm_agents.observability.views import metrics_view

urlpatterns = [
    path("admin/django-rq/", include("django_rq.urls")),
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("api/", include("nrllm_agents.api.urls")),
    path("", include("nrllm_agents.web.urls")),
]
