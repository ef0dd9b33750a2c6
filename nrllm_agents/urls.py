"""Everything the app serves, for a host to mount under a prefix of its choice::

    path("agents/", include("nrllm_agents.urls"))

``api/`` is the REST API with its schema and docs (``nrllm_api``), ``lg/`` the Agent Protocol
(LangGraph's SDKs), ``ag-ui/`` AG-UI (``nrllm_ag_ui``), ``playground/`` and
``accounts/`` the pages (``nrllm_web``), ``queues/`` the django-rq dashboard (superusers only,
linked from the admin), ``metrics`` the Prometheus text. The admin is the host's own: the app's
models register with ``admin.site``. Every link, redirect and script reaches these by
``reverse()``, so no path assumes where they are mounted.
"""

from __future__ import annotations

from django.urls import include, path

from .admin import queues
from .observability.views import metrics_view

urlpatterns = [
    path("api/", include("nrllm_agents.api.urls")),
    path("lg/", include("nrllm_agents.agent_protocol.urls")),  # the Agent Protocol (LangGraph SDKs)
    path("ag-ui/", include("nrllm_agents.ag_ui.urls")),  # AG-UI (CopilotKit, @ag-ui/client)
    path("queues/", include((queues.urlpatterns(), "django_rq"))),
    path("metrics", metrics_view, name="metrics"),
    path("", include("nrllm_agents.web.urls")),
]
