"""URL configuration: admin (with the RQ dashboard), the REST API, the playground."""

from django.contrib import admin
from django.urls import include, path

from nrllm_agents.admin import queues

urlpatterns = [
    # The queue dashboard, for superusers only (emptying a queue would strand runs).
    path("admin/django-rq/", include((queues.urlpatterns(), "django_rq"))),
    path("admin/", admin.site.urls),
    path("api/", include("nrllm_agents.api.urls")),
    path("", include("nrllm_agents.web.urls")),
]
