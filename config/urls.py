"""URL configuration: admin (with the RQ dashboard), the REST API, the Agent Protocol, the playground, ``/metrics``."""

from django.contrib import admin
from django.urls import include, path

from nrllm_agents.admin import queues
from nrllm_agents.observability.views import metrics_view

urlpatterns = [
    # The queue dashboard, for superusers only (emptying a queue would strand runs).
    path("admin/django-rq/", include((queues.urlpatterns(), "django_rq"))),
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("api/", include("nrllm_agents.api.urls")),
    path("lg/", include("nrllm_agents.agent_protocol.urls")),  # the Agent Protocol (LangGraph SDKs)
    path("", include("nrllm_agents.web.urls")),
]
